// A spatial room in Chromium, for crates/server/tests/browser.rs: one page
// asks for stereo (the page's default), one does not (`?stereo=0`). The
// test seats three Rust talkers far left, middle and far right. Each page
// measures what it receives channel by channel (a WebAudio channel
// splitter and an analyser per channel), and the stereo page shows where
// each talker sits.
//
// A third page, in a browser of its own whose fake microphone plays a tone
// (`talkerWav`), talks: it must not hear itself, in either channel.
//
// Input: one JSON argument {chromium, wav, talkerWav, stereoUrl, monoUrl,
// talkerUrl, freqs, people, waitMs}. Output: `@@{json}` lines as driver.js writes them:
// `joined`, then `done` ({stereo, mono}: per channel, the median FFT
// magnitude in dB at each frequency, the channel count the decoder gave,
// and the seat tags shown), or `failed`.
'use strict';

const { emit, log, launch, until, sleep } = require('./driver.js');

const cfg = JSON.parse(process.argv[2]);

async function open(browser, name, url) {
  const page = await browser.newPage({ viewport: { width: 900, height: 700 } });
  page.on('console', (m) => log(`${name} console.${m.type()}:`, m.text()));
  page.on('pageerror', (e) => log(`${name} page error:`, e.message));
  await page.goto(url, { timeout: cfg.waitMs });
  await page.click('#join');
  return page;
}

const inCall = (n) => window.tuttiState && window.tuttiState.phase === 'in-call'
  && window.tuttiState.connection === 'connected' && (window.tuttiState.participants || []).length >= n;

/** Per channel, the median over `ms` of the FFT magnitude (dB) at each frequency of the received stream. */
function channels(page, freqs, ms) {
  return page.evaluate(
    async ({ freqs, ms }) => {
      const stream = document.getElementById('remote').srcObject;
      const ctx = new AudioContext();
      await ctx.resume();
      const src = ctx.createMediaStreamSource(stream);
      const split = ctx.createChannelSplitter(2);
      src.connect(split);
      const ans = [0, 1].map((c) => {
        const an = ctx.createAnalyser();
        an.fftSize = 8192;
        an.smoothingTimeConstant = 0;
        split.connect(an, c);
        return an;
      });
      const bins = new Float32Array(ans[0].frequencyBinCount);
      const hz = ctx.sampleRate / ans[0].fftSize;
      const samples = ans.map(() => freqs.map(() => []));
      await new Promise((r) => setTimeout(r, 500));
      const end = performance.now() + ms;
      while (performance.now() < end) {
        ans.forEach((an, c) => {
          an.getFloatFrequencyData(bins);
          freqs.forEach((f, i) => {
            const k = Math.round(f / hz);
            let m = -Infinity;
            for (let j = k - 2; j <= k + 2; j++) m = Math.max(m, bins[j]);
            samples[c][i].push(Number.isFinite(m) ? m : -200);
          });
        });
        await new Promise((r) => setTimeout(r, 100));
      }
      const median = (a) => a.slice().sort((x, y) => x - y)[Math.floor(a.length / 2)];
      const out = { channelCount: src.channelCount, left: {}, right: {} };
      freqs.forEach((f, i) => {
        out.left[f] = median(samples[0][i]);
        out.right[f] = median(samples[1][i]);
      });
      const receivers = window.tuttiDebug.pc ? window.tuttiDebug.pc.getReceivers() : [];
      const params = receivers.map((r) => r.getParameters().codecs || []).flat();
      out.codec = params.map((c) => `${c.mimeType} ${c.channels} ${c.sdpFmtpLine || ''}`);
      ctx.close();
      return out;
    },
    { freqs, ms },
  );
}

async function main() {
  const browser = await launch(cfg.wav);
  const talking = await launch(cfg.talkerWav);
  try {
    const stereo = await open(browser, 'stereo', cfg.stereoUrl);
    const mono = await open(browser, 'mono', cfg.monoUrl);
    await until(stereo, 'the stereo page is in the call', inCall, cfg.people);
    await until(mono, 'the mono page is in the call', inCall, cfg.people);
    emit('joined');
    await sleep(2000);
    // The listeners first, on the stage of the three seated talkers only.
    const [s, m] = await Promise.all([channels(stereo, cfg.freqs, 4000), channels(mono, cfg.freqs, 4000)]);
    // Then a fourth talker, which must not hear itself.
    const talker = await open(talking, 'talker', cfg.talkerUrl);
    await until(talker, 'the talking page is in the call', inCall, cfg.people + 1);
    await sleep(2000);
    const [t, heard] = await Promise.all([channels(talker, cfg.freqs, 4000), channels(stereo, cfg.freqs, 4000)]);
    s.heardTalker = heard;
    s.seats = await stereo.$$eval('#participants li', (lis) =>
      lis.map((li) => ({ name: li.querySelector('.pname').textContent, seat: (li.querySelector('.tag.seat') || {}).textContent || '' })));
    await stereo.screenshot({ path: `${cfg.out}/spatial-page.png` });
    emit('done', { stereo: s, mono: m, talker: t });
  } finally {
    await browser.close().catch(() => {});
    await talking.close().catch(() => {});
  }
}

main().catch((e) => {
  log('failed:', e && e.stack ? e.stack : e);
  emit('failed', { message: String(e && e.message ? e.message : e) });
  process.exit(1);
});
