// Drives two headless Chromium browsers through tutti's web page for
// crates/server/tests/browser.rs. Each browser has its own fake microphone
// (a WAV file with its own tone), so each needs its own browser process.
//
// Input: one JSON argument (see `Config` in browser.rs). Output: lines
// `@@{json}` on stdout, which the Rust test reads as they come (marks with
// the step reached, then one `done` with everything measured); everything
// else goes to stderr. Every wait has a timeout; the Rust test asserts.
'use strict';

const path = require('path');
const { chromium } = require('playwright-core');

const cfg = JSON.parse(process.argv[2]);
const started = Date.now();
const WAIT = { timeout: cfg.waitMs || 20000 };

function emit(event, data) {
  process.stdout.write(`@@${JSON.stringify({ event, t: Date.now() - started, ...data })}\n`);
}

function log(...args) {
  process.stderr.write(`[driver ${((Date.now() - started) / 1000).toFixed(1)}s] ${args.join(' ')}\n`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Lines the test writes on stdin, read from the first `command` on. */
const lines = [];
let input = null;

/** Waits (at most `ms`) for the test to write the line `want` on stdin, and takes it. */
async function command(want, ms) {
  if (!input) input = require('readline').createInterface({ input: process.stdin }).on('line', (l) => lines.push(l.trim()));
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const at = lines.indexOf(want);
    if (at >= 0) {
      lines.splice(at, 1);
      return;
    }
    await sleep(50);
  }
  throw new Error(`no '${want}' from the test within ${ms} ms`);
}

/** Stops reading stdin, so that the script can end by itself. */
function endCommands() {
  if (input) input.close();
}

/** A browser whose fake microphone plays `wav`; without `fakeUi`, nobody answers its permission prompt. */
async function launch(wav, fakeUi = true) {
  return chromium.launch({
    executablePath: cfg.chromium,
    headless: true,
    chromiumSandbox: false, // adds --no-sandbox: the test runs as root
    timeout: 30000,
    args: [
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      ...(fakeUi ? ['--use-fake-ui-for-media-stream'] : []),
      '--use-fake-device-for-media-stream',
      `--use-file-for-fake-audio-capture=${wav}`,
      // Chromium leaves loopback out of ICE gathering: on a host with only
      // `lo` it would have no candidate that reaches tutti at 127.0.0.1.
      '--allow-loopback-in-peer-connection',
      ...(cfg.extraArgs || []),
    ],
  });
}

async function openPage(browser, name, processing, room) {
  const page = await browser.newPage({ viewport: { width: 900, height: 640 } });
  page.on('console', (m) => log(`${name} console.${m.type()}:`, m.text()));
  page.on('pageerror', (e) => log(`${name} page error:`, e.message));
  const url = new URL(cfg.base);
  url.searchParams.set('room', room || cfg.room);
  url.searchParams.set('name', name);
  if (processing === false) url.searchParams.set('processing', '0');
  await page.goto(url.href, WAIT);
  return page;
}

const state = (page) =>
  page.evaluate(() => JSON.parse(JSON.stringify(window.tuttiState, (k, v) => (Number.isFinite(v) || typeof v !== 'number' ? v : null))));

/** Waits for `fn(arg)` to hold in the page; on timeout, says what was awaited and what the page showed. */
async function until(page, what, fn, arg) {
  try {
    await page.waitForFunction(fn, arg, WAIT);
  } catch (e) {
    let shown = '';
    try {
      const s = await state(page);
      delete s.offerSdp;
      delete s.answerSdp;
      shown = JSON.stringify(s);
    } catch (_) {
      shown = '(page state unavailable)';
    }
    throw new Error(`${what}: not within ${WAIT.timeout} ms; the page's state: ${shown}`);
  }
}

/**
 * Median over `ms` of the received track's FFT magnitude (dB) at each
 * frequency: the page's own analyser, or (`element`, a selector) one made
 * on what that media element plays.
 */
function tones(page, freqs, ms, element) {
  return page.evaluate(
    async ({ freqs, ms, element }) => {
      let an = element ? null : window.tuttiDebug.remoteAnalyser;
      if (element) {
        const ctx = new AudioContext();
        await ctx.resume();
        an = ctx.createAnalyser();
        an.fftSize = 8192;
        an.smoothingTimeConstant = 0;
        ctx.createMediaStreamSource(document.querySelector(element).srcObject).connect(an);
        await new Promise((r) => setTimeout(r, 500));
      }
      if (!an) return null;
      const bins = new Float32Array(an.frequencyBinCount);
      const hz = an.context.sampleRate / an.fftSize;
      const samples = freqs.map(() => []);
      const end = performance.now() + ms;
      while (performance.now() < end) {
        an.getFloatFrequencyData(bins);
        freqs.forEach((f, i) => {
          const k = Math.round(f / hz);
          let m = -Infinity;
          for (let j = k - 2; j <= k + 2; j++) m = Math.max(m, bins[j]);
          samples[i].push(Number.isFinite(m) ? m : -200);
        });
        await new Promise((r) => setTimeout(r, 100));
      }
      const median = (a) => a.slice().sort((x, y) => x - y)[Math.floor(a.length / 2)];
      const out = {};
      freqs.forEach((f, i) => {
        out[f] = median(samples[i]);
      });
      if (element) an.context.close();
      return out;
    },
    { freqs, ms, element },
  );
}

/** ICE, DTLS and SRTP as Chromium's stats report them. */
function transport(page) {
  return page.evaluate(async () => {
    const stats = await window.tuttiDebug.pc.getStats();
    const byId = new Map();
    stats.forEach((r) => byId.set(r.id, r));
    const t = [...byId.values()].find((r) => r.type === 'transport');
    const pair = t && byId.get(t.selectedCandidatePairId);
    const cand = (id) => {
      const c = byId.get(id);
      return c && `${c.protocol} ${c.address}:${c.port} ${c.candidateType}`;
    };
    const inbound = [...byId.values()].find((r) => r.type === 'inbound-rtp');
    const codec = inbound && byId.get(inbound.codecId);
    return {
      iceRole: t && t.iceRole,
      dtlsRole: t && t.dtlsRole,
      dtlsCipher: t && t.dtlsCipher,
      srtpCipher: t && t.srtpCipher,
      local: pair && cand(pair.localCandidateId),
      remote: pair && cand(pair.remoteCandidateId),
      rttMs: pair && pair.currentRoundTripTime * 1000,
      // STUN checks on the pair, and the answers Chromium accepted (it drops
      // one whose MESSAGE-INTEGRITY or FINGERPRINT is wrong).
      requestsSent: pair && pair.requestsSent,
      responsesReceived: pair && pair.responsesReceived,
      codec: codec && `${codec.mimeType}/${codec.clockRate}/${codec.channels} ${codec.sdpFmtpLine || ''}`,
      packetsReceived: inbound && inbound.packetsReceived,
      packetsLost: inbound && inbound.packetsLost,
      jitterMs: inbound && inbound.jitter * 1000,
      concealedSamples: inbound && inbound.concealedSamples,
    };
  });
}

async function main() {
  const result = { pages: {} };
  const [a, b] = cfg.pages;
  log('launching two browsers');
  const browsers = await Promise.all([launch(a.wav), launch(b.wav)]);
  result.chromium = browsers[0].version();
  try {
    const pageA = await openPage(browsers[0], a.name, a.processing);
    const pageB = await openPage(browsers[1], b.name, b.processing);
    emit('pages_open');

    // Join: click as a person would; wait for ICE and DTLS.
    await Promise.all([pageA.click('#join'), pageB.click('#join')]);
    const connected = () => window.tuttiState.phase === 'in-call' && window.tuttiState.connection === 'connected';
    await Promise.all([until(pageA, 'alice in the call', connected), until(pageB, 'bob in the call', connected)]);
    emit('connected');
    const stA = await state(pageA);
    result.offer = stA.offerSdp;
    result.answer = stA.answerSdp;

    // Everyone is listed on both pages, and page A sees others talking.
    const everyone = cfg.pages.length + cfg.others.length;
    const listed = (n) => window.tuttiState.participants.length === n;
    await Promise.all([
      until(pageA, 'alice lists everyone', listed, everyone),
      until(pageB, 'bob lists everyone', listed, everyone),
    ]);
    await until(
      pageA,
      'alice sees the others talking',
      (n) => window.tuttiState.participants.filter((p) => !p.you && p.talking).length === n,
      everyone - 1,
    );
    result.talkingIndicators = await pageA.$$eval('#participants li.talking:not(.you) .pname', (els) =>
      els.map((e) => e.textContent),
    );
    result.listed = await pageA.$$eval('#participants li .pname', (els) => els.map((e) => e.textContent));

    // What each page hears, once the jitter buffers settled.
    await sleep(cfg.settleMs);
    emit('measure_start');
    const freqs = [...cfg.tones, cfg.control];
    const [heardA, heardB] = await Promise.all([tones(pageA, freqs, cfg.measureMs), tones(pageB, freqs, cfg.measureMs)]);
    emit('measure_end');
    result.pages[a.name] = { heard: heardA, state: await state(pageA), transport: await transport(pageA) };
    result.pages[b.name] = { heard: heardB, state: await state(pageB), transport: await transport(pageB) };

    const shot = path.join(cfg.out, 'call.png');
    await pageA.screenshot({ path: shot, fullPage: true });
    await pageB.screenshot({ path: path.join(cfg.out, 'call-b.png'), fullPage: true });
    result.screenshot = shot;

    // A third person finds the room full: a sentence, not a code.
    if (cfg.roomFull) {
      const pageC = await openPage(browsers[1], 'carol');
      await pageC.click('#join');
      await until(pageC, 'carol told the room is full', () => window.tuttiState.phase === 'error');
      result.roomFull = {
        state: await state(pageC),
        shown: await pageC.$eval('#error', (e) => (e.hidden ? '' : e.textContent)),
      };
      await pageC.screenshot({ path: path.join(cfg.out, 'room-full.png') });
      await pageC.close();
    }

    // Someone who refuses the microphone is told what to do. The page
    // creates the room it names (it does not exist yet) before asking.
    if (cfg.micDenied) {
      // Headless, with no fake UI to grant it, the permission prompt is refused.
      const browserD = await launch(a.wav, false);
      browsers.push(browserD);
      const pageD = await openPage(browserD, 'dave', undefined, cfg.micDenied);
      await pageD.click('#join');
      await until(pageD, 'dave told the microphone was denied', () => window.tuttiState.phase === 'error');
      result.micDenied = {
        state: await state(pageD),
        shown: await pageD.$eval('#error', (e) => (e.hidden ? '' : e.textContent)),
      };
      await pageD.screenshot({ path: path.join(cfg.out, 'mic-denied.png') });
      await pageD.close();
    }

    // A mutes herself: B stops hearing her tone; both pages show her muted.
    await pageA.click('#mute');
    const aId = stA.me;
    await until(pageB, 'bob sees alice muted', (id) => window.tuttiState.participants.some((p) => p.id === id && p.muted), aId);
    await until(pageA, 'alice muted', () => window.tuttiState.muted);
    await sleep(cfg.settleMs);
    emit('muted_start');
    result.mutedHeardB = await tones(pageB, freqs, cfg.measureMs);
    emit('muted_end');
    result.muteButton = await pageA.$eval('#mute', (e) => ({ text: e.textContent, pressed: e.getAttribute('aria-pressed') }));
    await pageA.screenshot({ path: path.join(cfg.out, 'muted.png') });

    // Unmuted, she is heard again.
    await pageA.click('#mute');
    await until(pageB, 'bob sees alice unmuted', (id) => window.tuttiState.participants.some((p) => p.id === id && !p.muted), aId);
    await sleep(cfg.settleMs);
    result.unmutedHeardB = await tones(pageB, freqs, cfg.measureMs);

    // The stage (auth is off: every page is a moderator's). B raises her
    // hand; A sees it and lowers it with the button on B's row; A locks and
    // unlocks the room, and B's page follows.
    {
      const bId = (await state(pageB)).me;
      const handOf = (id) => window.tuttiState.participants.some((p) => p.id === id && p.hand);
      await pageB.click('#hand');
      await until(pageA, 'alice sees bob raise his hand', handOf, bId);
      const row = `#participants li[data-id="${bId}"]`;
      const stage = {
        adminBar: await pageA.$eval('#admin-bar', (e) => !e.hidden),
        handTag: await pageA.$eval(row, (e) => !!e.querySelector('.tag.hand')),
        actions: await pageA.$$eval(`${row} button[data-action]`, (els) => els.map((e) => e.dataset.action)),
        handButton: await pageB.$eval('#hand', (e) => e.textContent),
      };
      await pageA.click(`${row} button[data-action="lower"]`);
      await until(pageB, 'bob sees his hand lowered', (id) => !window.tuttiState.participants.some((p) => p.id === id && p.hand), bId);
      await pageA.click('#lock');
      await until(pageB, 'bob sees the room locked', () => window.tuttiState.locked);
      stage.lockButton = await pageA.$eval('#lock', (e) => e.textContent);
      await pageA.click('#lock');
      await until(pageB, 'bob sees the room unlocked', () => !window.tuttiState.locked);
      await pageA.screenshot({ path: path.join(cfg.out, 'stage.png') });
      result.stage = stage;
      emit('stage');
    }

    // Chat and a reaction (data messages): B types a line, A sees it with B's
    // name; A claps, B sees it. Nobody gets their own back from the server.
    {
      await pageB.fill('#chat-input', 'hello from bob');
      await pageB.click('#chat-send');
      const said = (text) => window.tuttiState.chat.some((c) => c.text === text && c.name !== 'You');
      await until(pageA, 'alice sees bob\'s chat line', said, 'hello from bob');
      await pageA.click('.reaction[data-emoji="👏"]');
      const clapped = () => window.tuttiState.chat.some((c) => c.emoji === '👏' && c.name !== 'You');
      await until(pageB, 'bob sees alice clap', clapped);
      await sleep(300);
      result.chat = {
        a: (await state(pageA)).chat,
        b: (await state(pageB)).chat,
        aLog: await pageA.$$eval('#chat-log li', (els) => els.map((e) => e.textContent)),
        bInput: await pageB.$eval('#chat-input', (e) => e.value),
      };
      emit('chat');
    }

    // A leaves: B sees her go; A's page says so.
    await pageA.click('#leave');
    await until(pageB, 'bob sees alice leave', (id) => !window.tuttiState.participants.some((p) => p.id === id), aId);
    await until(pageA, 'alice has left', () => window.tuttiState.phase === 'left');
    result.afterLeave = {
      a: await state(pageA),
      b: (await state(pageB)).participants.map((p) => p.name),
      notice: await pageA.$eval('#notice', (e) => (e.hidden ? '' : e.textContent)),
    };
    emit('left');
  } finally {
    await Promise.all(browsers.map((br) => br.close().catch(() => {})));
  }
  result.seconds = (Date.now() - started) / 1000;
  emit('done', { result });
}

// Run as a script: the test above. Required by first_run.js: its helpers
// (whose `cfg` is the requiring script's own argument: same keys).
if (require.main === module) {
  main().catch((e) => {
    log('failed:', e && e.stack ? e.stack : e);
    emit('failed', { message: String(e && e.message ? e.message : e) });
    process.exit(1);
  });
}

module.exports = { emit, log, sleep, launch, state, until, tones, transport, command, endCommands };
