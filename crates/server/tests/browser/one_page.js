// One browser, one page of tutti, for the network tests of
// crates/server/tests/browser.rs: Chromium (playwright-core) or Debian's
// Firefox ESR (puppeteer-core over WebDriver BiDi). The Rust test runs one
// of these per participant, each possibly inside a network namespace of its
// own (`ip netns exec … node one_page.js`), so node and its browser share
// that namespace.
//
// Input: one JSON argument (see `page` in browser.rs). Output: lines
// `@@{json}` on stdout: `connected`, `ready` (everyone listed and talking);
// then, for each `measure` the test writes on stdin, `measured` (what the
// page heard, its ICE path, its state); for `await-restart` (after the test
// cut the page's UDP), `restarting` (its first restart offer's outcome);
// for each `watch-restart` the test writes on
// stdin (after moving the page to another address), `restart` (how the
// page's ICE restart ended); after `leave`, `done`; or `failed`. Every wait
// has a timeout.
//
// What the page hears is measured from its received track recorded with
// MediaRecorder and decoded on an OfflineAudioContext: neither needs an
// audio output device (headless Firefox has none, so its AudioContext
// never starts; that is what the page must survive).
'use strict';

const path = require('path');
const readline = require('readline');

const cfg = JSON.parse(process.argv[2]);
const started = Date.now();
const WAIT_MS = cfg.waitMs || 30000;

function emit(event, data) {
  process.stdout.write(`@@${JSON.stringify({ event, t: Date.now() - started, ...data })}\n`);
}

function log(...args) {
  process.stderr.write(`[${cfg.name} ${((Date.now() - started) / 1000).toFixed(1)}s] ${args.join(' ')}\n`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Lines the test writes on stdin. */
const commands = [];
let wake = null;
readline
  .createInterface({ input: process.stdin })
  .on('line', (l) => {
    commands.push(l.trim());
    if (wake) wake();
  })
  .on('close', () => {
    // The test is gone: stop (the browser is closed on the way out).
    commands.push('eof');
    if (wake) wake();
  });
async function command(ms) {
  const end = Date.now() + ms;
  while (!commands.length && Date.now() < end) {
    await new Promise((r) => {
      wake = r;
      setTimeout(r, 200);
    });
  }
  return commands.shift() || null;
}

/** A browser and its page, behind one small interface for both drivers. */
async function open(url) {
  if (cfg.browser === 'firefox') {
    const puppeteer = require('puppeteer-core');
    const browser = await puppeteer.launch({
      browser: 'firefox',
      protocol: 'webDriverBiDi',
      executablePath: cfg.executable,
      headless: true,
      timeout: 60000,
      extraPrefsFirefox: {
        // A fake microphone (a 1 kHz tone), granted without a prompt.
        'media.navigator.streams.fake': true,
        'media.navigator.permission.disabled': true,
        // The page's origin (the namespace's view of the server) counts as secure.
        'dom.securecontext.allowlist': cfg.secureHost || '',
        'media.autoplay.default': 0,
        // fiona is the page whose UDP is cut and restored: without this,
        // Firefox once nominated tutti's TCP candidate first (1 run in 38,
        // and the cut then cut nothing), and its restarts always recovered
        // over TCP, so the UDP restart was never tested.
        'media.peerconnection.ice.tcp': false,
      },
    });
    const page = await browser.newPage();
    page.on('console', (m) => log(`console.${m.type()}:`, m.text()));
    page.on('pageerror', (e) => log('page error:', e.message));
    await page.goto(url, { timeout: WAIT_MS });
    return {
      version: await browser.version(),
      evaluate: (fn, arg) => page.evaluate(fn, arg),
      click: (sel) => page.click(sel),
      waitFor: (fn, arg) => page.waitForFunction(fn, { timeout: WAIT_MS, polling: 100 }, arg),
      screenshot: (file) => page.screenshot({ path: file }),
      close: () => browser.close(),
    };
  }
  const { chromium } = require('playwright-core');
  const browser = await chromium.launch({
    executablePath: cfg.executable,
    headless: true,
    chromiumSandbox: false,
    timeout: 60000,
    args: [
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--use-fake-ui-for-media-stream',
      '--use-fake-device-for-media-stream',
      `--use-file-for-fake-audio-capture=${cfg.wav}`,
      '--allow-loopback-in-peer-connection',
      '--autoplay-policy=no-user-gesture-required',
      ...(cfg.secureHost ? [`--unsafely-treat-insecure-origin-as-secure=${new URL(url).origin}`] : []),
    ],
  });
  const page = await browser.newPage({ viewport: { width: 900, height: 640 } });
  page.on('console', (m) => log(`console.${m.type()}:`, m.text()));
  page.on('pageerror', (e) => log('page error:', e.message));
  await page.goto(url, { timeout: WAIT_MS });
  return {
    version: browser.version(),
    evaluate: (fn, arg) => page.evaluate(fn, arg),
    click: (sel) => page.click(sel),
    waitFor: (fn, arg) => page.waitForFunction(fn, arg, { timeout: WAIT_MS }),
    screenshot: (file) => page.screenshot({ path: file }),
    close: () => browser.close(),
  };
}

const stateOf = (p) =>
  p.evaluate(() => {
    const s = JSON.parse(
      JSON.stringify(window.tuttiState, (k, v) => (Number.isFinite(v) || typeof v !== 'number' ? v : null)),
    );
    delete s.offerSdp;
    delete s.answerSdp;
    return s;
  });

async function until(p, what, fn, arg) {
  try {
    await p.waitFor(fn, arg);
  } catch (e) {
    let shown = '(page state unavailable)';
    try {
      shown = JSON.stringify(await stateOf(p));
    } catch (_) {
      // keep the placeholder
    }
    throw new Error(`${what}: not within ${WAIT_MS} ms (${e.message}); the page's state: ${shown}`);
  }
}

/** The ICE path in use, from getStats (Chromium: the transport's pair; Firefox: the selected pair). */
function transport(p) {
  return p.evaluate(async () => {
    const stats = await window.tuttiDebug.pc.getStats();
    const all = [];
    stats.forEach((r) => all.push(r));
    const byId = new Map(all.map((r) => [r.id, r]));
    const t = all.find((r) => r.type === 'transport');
    const pair =
      (t && byId.get(t.selectedCandidatePairId)) ||
      all.find((r) => r.type === 'candidate-pair' && r.selected) ||
      all.find((r) => r.type === 'candidate-pair' && r.nominated && r.state === 'succeeded');
    const cand = (id) => {
      const c = byId.get(id);
      if (!c) return null;
      return {
        type: c.candidateType,
        protocol: c.protocol,
        address: `${c.address || c.ip}:${c.port}`,
        relayProtocol: c.relayProtocol || null,
      };
    };
    const inbound = all.find((r) => r.type === 'inbound-rtp' && (r.kind === 'audio' || r.mediaType === 'audio'));
    const outbound = all.find((r) => r.type === 'outbound-rtp' && (r.kind === 'audio' || r.mediaType === 'audio'));
    return {
      local: pair ? cand(pair.localCandidateId) : null,
      remote: pair ? cand(pair.remoteCandidateId) : null,
      packetsReceived: inbound ? inbound.packetsReceived : 0,
      packetsSent: outbound ? outbound.packetsSent : 0,
      jitterMs: inbound ? inbound.jitter * 1000 : null,
    };
  });
}

/**
 * Records the received track for `ms`, decodes it, and gives each
 * frequency's level in dB (20·log10 of its Goertzel amplitude, Hann
 * window; a full-scale sine is 0 dB): the mean power over 100 ms blocks.
 */
function heard(p, freqs, ms) {
  return p.evaluate(
    async ({ freqs, ms }) => {
      const stream = document.getElementById('remote').srcObject;
      if (!stream) return { error: 'no remote stream' };
      const rec = new MediaRecorder(stream);
      const chunks = [];
      rec.ondataavailable = (e) => chunks.push(e.data);
      rec.start(250);
      await new Promise((r) => setTimeout(r, ms));
      const stopped = new Promise((r) => {
        rec.onstop = r;
      });
      rec.stop();
      await Promise.race([stopped, new Promise((r) => setTimeout(r, 3000))]);
      const blob = new Blob(chunks, { type: rec.mimeType || 'audio/ogg' });
      const rate = 48000;
      const ctx = new OfflineAudioContext(1, rate, rate);
      const buf = await ctx.decodeAudioData(await blob.arrayBuffer());
      const x = buf.getChannelData(0);
      const block = Math.round(buf.sampleRate / 10);
      const out = { seconds: x.length / buf.sampleRate };
      for (const f of freqs) {
        const w = (2 * Math.PI * f) / buf.sampleRate;
        const coeff = 2 * Math.cos(w);
        const levels = [];
        // The first 200 ms may hold the recorder's start-up.
        for (let start = 2 * block; start + block <= x.length; start += block) {
          let s1 = 0;
          let s2 = 0;
          for (let i = start; i < start + block; i++) {
            // A Hann window: a loud tone 60 Hz away leaks nothing into this bin.
            const hann = 0.5 - 0.5 * Math.cos((2 * Math.PI * (i - start)) / (block - 1));
            const s0 = x[i] * hann + coeff * s1 - s2;
            s2 = s1;
            s1 = s0;
          }
          const power = s1 * s1 + s2 * s2 - coeff * s1 * s2;
          // Amplitude: 2|X|/Σw, with Σw = block/2 for the Hann window.
          const amp = (4 * Math.sqrt(Math.max(power, 0))) / block;
          levels.push(amp > 0 ? 20 * Math.log10(amp) : -200);
        }
        // The mean power over the blocks (a tone present in part of them
        // still counts), and the share of blocks where it stands out.
        const mean = levels.reduce((acc, l) => acc + 10 ** (l / 10), 0) / Math.max(levels.length, 1);
        out[f] = mean > 0 ? 10 * Math.log10(mean) : -200;
        out[`${f} present`] = levels.filter((l) => l > -40).length / Math.max(levels.length, 1);
      }
      return out;
    },
    { freqs, ms },
  );
}

async function main() {
  const url = new URL(cfg.base);
  url.searchParams.set('room', cfg.room);
  url.searchParams.set('name', cfg.name);
  url.searchParams.set('processing', '0');
  if (cfg.token) url.searchParams.set('token', cfg.token);
  const p = await open(url.href);
  const result = { browser: p.version };
  try {
    await p.click('#join');
    await until(
      p,
      `${cfg.name} in the call`,
      () => window.tuttiState.phase === 'in-call' && window.tuttiState.connection === 'connected',
    );
    emit('connected', { transport: await transport(p) });
    await until(p, `${cfg.name} lists everyone`, (n) => window.tuttiState.participants.length === n, cfg.everyone);
    // Everyone else is sending (the server says they talk) before we listen.
    await until(
      p,
      `${cfg.name} sees the others talking`,
      (n) => window.tuttiState.participants.filter((x) => !x.you && x.talking).length === n,
      cfg.everyone - 1,
    );
    await sleep(cfg.settleMs || 1500);
    emit('ready');
    for (;;) {
      const cmd = await command(cfg.holdMs || 120000);
      if (cmd === 'measure') {
        // The test says when: everyone is in the room's mix.
        result.heard = await heard(p, cfg.freqs, cfg.measureMs || 2000);
        result.transport = await transport(p);
        result.state = await stateOf(p);
        result.notice = await p.evaluate(() => {
          const e = document.getElementById('notice');
          return e.hidden ? '' : e.textContent;
        });
        await p.screenshot(path.join(cfg.out, `${cfg.name}.png`));
        emit('measured', { result });
        continue;
      }
      if (cmd === 'await-restart') {
        // The test cut our UDP: ICE drops; wait for the page's first restart offer.
        const by = Date.now() + (cfg.restartWaitMs || 30000);
        const tried = () => window.tuttiState.phase !== 'in-call' || window.tuttiState.iceRestarts.some((a) => a.status);
        while (!(await p.evaluate(tried)) && Date.now() < by) await sleep(100);
        emit('restarting', { state: await stateOf(p) });
        continue;
      }
      if (cmd === 'watch-restart') {
        // The test let UDP through again. Wait for the outcome: connected
        // again, or the call ended with a message.
        const outcome = () => {
          const s = window.tuttiState;
          const ice = window.tuttiDebug.pc && window.tuttiDebug.pc.iceConnectionState;
          return s.phase !== 'in-call' || (s.connection === 'connected' && (ice === 'connected' || ice === 'completed'));
        };
        const by = Date.now() + (cfg.restartWaitMs || 45000);
        while (!(await p.evaluate(outcome)) && Date.now() < by) await sleep(200);
        const restart = { state: await stateOf(p) };
        restart.error = await p.evaluate(() => {
          const e = document.getElementById('error');
          return e.hidden ? '' : e.textContent;
        });
        if (restart.state.phase === 'in-call') restart.transport = await transport(p);
        emit('restart', { restart });
        continue;
      }
      if (cmd === 'leave' && (await p.evaluate(() => window.tuttiState.phase === 'in-call'))) {
        await p.click('#leave');
        await until(p, `${cfg.name} has left`, () => window.tuttiState.phase === 'left');
      }
      break;
    }
  } finally {
    await p.close().catch(() => {});
  }
  emit('done', { seconds: (Date.now() - started) / 1000 });
  process.exit(0);
}

main().catch((e) => {
  log('failed:', e && e.stack ? e.stack : e);
  emit('failed', { message: String(e && e.message ? e.message : e) });
  process.exit(1);
});
