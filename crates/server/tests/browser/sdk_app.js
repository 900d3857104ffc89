// The client SDK's README app in Chromium, for the SDK test of
// crates/server/tests/browser.rs. The app (the README's index.html and
// app.js, beside the SDK's committed dist/tutti.js) is served by a small
// static server here, on its own origin (`cfg.appPort` on 127.0.0.1: the
// tutti server allows it in `cors.allowed_origins`), and opened with
// `#server=…&token=…`, the server being a TCP relay here to the tutti
// server. Then the page, through the SDK only: joins over the WebSocket,
// lists and hears the Rust client, shows it talking, mutes, raises its
// hand; the relay drops every connection (no close frame) and the SDK
// resumes its participant on a new socket; a fresh token is taken; a second Room in the same page
// joins WHIP-style (`transport: 'rest'`), hears the Rust client, mutes over
// REST and leaves; the first leaves.
//
// Output: `@@{json}` lines (marks, then `done` with what was measured, or
// `failed`); the Rust test asserts. Every wait has a timeout.
'use strict';

const fs = require('fs');
const http = require('http');
const net = require('net');
const path = require('path');
const { chromium } = require('playwright-core');
const { command } = require('./driver.js');

const cfg = JSON.parse(process.argv[2]);
const started = Date.now();
const WAIT = { timeout: cfg.waitMs || 20000 };

function emit(event, data) {
  process.stdout.write(`@@${JSON.stringify({ event, t: Date.now() - started, ...data })}\n`);
}

function log(...args) {
  process.stderr.write(`[sdk app ${((Date.now() - started) / 1000).toFixed(1)}s] ${args.join(' ')}\n`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Emits a step at which the test reads the server's state, and waits until
 * it has (it says so on stdin): the page changes that state next (a leave
 * right after `rest_muted` once removed the participant before the test looked). */
async function step(event) {
  emit(event);
  await command(event, 10000);
}

/** The app's folder over HTTP on 127.0.0.1:`port`. */
function serveApp(dir, port) {
  const types = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8' };
  const server = http.createServer((req, res) => {
    const name = new URL(req.url, 'http://x').pathname.replace(/^\/$/, '/index.html').slice(1);
    const file = path.join(dir, path.basename(name));
    fs.readFile(file, (err, body) => {
      if (err) {
        res.writeHead(404);
        res.end();
        return;
      }
      res.writeHead(200, { 'Content-Type': types[path.extname(file)] || 'application/octet-stream', 'Cache-Control': 'no-store' });
      res.end(body);
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

/**
 * A TCP relay on 127.0.0.1:`port` to the tutti server at `target`
 * (host:port): the app reaches the API and its WebSocket through it, so
 * that `cut()` can drop every connection at once, with no WebSocket close
 * frame, as a network change does.
 */
function relay(port, target) {
  const [host, to] = [target.replace(/:\d+$/, ''), Number(target.replace(/^.*:/, ''))];
  const open = new Set();
  const server = net.createServer((inbound) => {
    const outbound = net.connect(to, host);
    const pair = [inbound, outbound];
    open.add(pair);
    const close = () => {
      open.delete(pair);
      inbound.destroy();
      outbound.destroy();
    };
    inbound.on('error', close).on('close', close);
    outbound.on('error', close).on('close', close);
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () =>
      resolve({
        cut: () => {
          const n = open.size;
          for (const [a, b] of Array.from(open)) {
            a.resetAndDestroy();
            b.destroy();
          }
          return n;
        },
        close: () => server.close(),
      }),
    );
  });
}

async function until(page, what, fn, arg) {
  try {
    await page.waitForFunction(fn, arg, WAIT);
  } catch (e) {
    let shown = '(page state unavailable)';
    try {
      shown = await page.evaluate(() =>
        JSON.stringify(window.room ? { state: window.room.state, connection: window.room.connectionState, participants: window.room.participants } : null),
      );
    } catch (_) {
      // keep the placeholder
    }
    throw new Error(`${what}: not within ${WAIT.timeout} ms; the room: ${shown}`);
  }
}

/** Median over `ms` of `window[key].remoteStream`'s FFT magnitude (dB) at each frequency. */
function tones(page, key, freqs, ms) {
  return page.evaluate(
    async ({ key, freqs, ms }) => {
      const room = window[key];
      // Chromium feeds a remote track into WebAudio only while a media element plays it.
      const el = new Audio();
      el.srcObject = room.remoteStream;
      el.muted = true;
      await el.play().catch(() => {});
      const ctx = new AudioContext();
      await ctx.resume();
      const an = ctx.createAnalyser();
      an.fftSize = 8192;
      an.smoothingTimeConstant = 0.5;
      ctx.createMediaStreamSource(room.remoteStream).connect(an);
      await new Promise((r) => setTimeout(r, 500));
      const bins = new Float32Array(an.frequencyBinCount);
      const hz = ctx.sampleRate / an.fftSize;
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
      await ctx.close();
      el.srcObject = null;
      const median = (a) => a.slice().sort((x, y) => x - y)[Math.floor(a.length / 2)];
      const out = {};
      freqs.forEach((f, i) => {
        out[f] = median(samples[i]);
      });
      return out;
    },
    { key, freqs, ms },
  );
}

const people = (page, key) =>
  page.evaluate((key) => window[key].participants.map((p) => ({ name: p.name, you: p.you, talking: p.talking, muted: p.muted, hand: p.hand })), key);

async function main() {
  const result = {};
  const app = await serveApp(cfg.appDir, cfg.appPort);
  const api = await relay(cfg.relayPort, new URL(cfg.server).host);
  const server = `http://127.0.0.1:${cfg.relayPort}/`;
  const browser = await chromium.launch({
    executablePath: cfg.chromium,
    headless: true,
    chromiumSandbox: false,
    timeout: 30000,
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
      // The app plays the room with <audio autoplay>, with no click first.
      '--autoplay-policy=no-user-gesture-required',
    ],
  });
  result.chromium = browser.version();
  try {
    const page = await browser.newPage();
    page.on('console', (m) => log(`console.${m.type()}:`, m.text()));
    page.on('pageerror', (e) => log('page error:', e.message));
    const link = new URLSearchParams({ server, token: cfg.token });
    await page.goto(`http://127.0.0.1:${cfg.appPort}/#${link}`, WAIT);

    // The README's app joins by itself.
    await until(page, 'the app joined and connected', () => !!window.room && window.room.state === 'joined' && window.room.connectionState === 'connected');
    emit('joined');
    await until(
      page,
      'the app lists everyone',
      ({ n, other }) => window.room.participants.length === n && window.room.participants.some((p) => !p.you && p.name === other),
      { n: cfg.everyone, other: cfg.other },
    );
    await until(page, 'the app shows the Rust client talking', () => window.room.participants.some((p) => !p.you && p.talking));
    result.listed = await people(page, 'room');
    result.talking = result.listed.filter((p) => !p.you && p.talking).map((p) => p.name);
    result.shown = await page.$eval('#people', (e) => e.textContent);
    result.self = await page.evaluate(() => ({ id: window.room.id, muted: window.room.muted, admin: window.room.admin, iceServers: window.room.iceServers.length }));

    // What it hears (and the Rust client, meanwhile, hears it).
    emit('measure_start');
    result.heard = await tones(page, 'room', cfg.tones, cfg.measureMs);
    emit('measure_end');

    // Mute and hand, through the SDK; the server's events come back.
    await page.evaluate(() => window.room.setMuted(true));
    await until(page, 'muted', () => window.room.muted && window.room.me.muted);
    await step('muted');
    await sleep(1500);
    emit('muted_end');
    await page.evaluate(() => window.room.setMuted(false));
    await page.evaluate(() => window.room.setHand(true));
    await until(page, 'the hand comes back raised', () => !!window.room.me && window.room.me.hand);
    await step('hand');

    // The network drops the socket (no close frame): the SDK resumes the participant on a new one.
    await page.evaluate(() => {
      window.seen = [];
      for (const e of ['socketLost', 'resumed', 'ended']) window.room.on(e, (v) => window.seen.push(e + (v && v.code ? ` ${v.code}` : '')));
    });
    result.resume = { cut: api.cut() };
    await until(page, 'the socket resumed', () => window.seen.includes('resumed'));
    result.resume.seen = await page.evaluate(() => window.seen);
    result.resume.after = await page.evaluate(() => ({ state: window.room.state, id: window.room.id, resumes: window.room.socketResumes, listed: window.room.participants.length }));
    await step('resumed');

    // A fresh token for the same identity, before the first one expires.
    result.tokenAccepted = await page.evaluate(
      (token) =>
        new Promise((resolve, reject) => {
          setTimeout(() => reject(new Error('no token_accepted within 10 s')), 10000);
          window.room.on('serverError', (err) => reject(err));
          window.room.on('tokenAccepted', (v) => resolve(v.expiresAt));
          window.room.refreshToken(token);
        }),
      cfg.freshToken,
    );

    // A second Room in the same page, WHIP-style over REST, with its own token.
    await page.evaluate(
      async ({ server, token }) => {
        const { Room } = await import('./tutti.js');
        const rest = new Room({ url: server, room: window.room.room, token, name: 'rest', transport: 'rest' });
        window.rest = rest;
        await rest.join();
      },
      { server, token: cfg.restToken },
    );
    await until(page, 'the REST participant connected', () => window.rest.state === 'joined' && window.rest.connectionState === 'connected');
    await until(page, 'the REST participant lists everyone', (n) => window.rest.participants.length === n, cfg.everyone + 1);
    await until(page, 'the app lists the REST participant', (n) => window.room.participants.length === n, cfg.everyone + 1);
    result.rest = { listed: await people(page, 'rest'), id: await page.evaluate(() => window.rest.id) };
    await step('rest_joined');
    result.rest.heard = await tones(page, 'rest', cfg.tones, cfg.measureMs);
    await page.evaluate(() => window.rest.setMuted(true));
    await until(page, 'the app sees the REST participant muted', () => window.room.participants.some((p) => p.name === 'rest' && p.muted));
    await step('rest_muted');
    await page.evaluate(() => window.rest.leave());
    await until(page, 'the app sees the REST participant leave', (n) => window.room.participants.length === n, cfg.everyone);
    result.rest.ended = await page.evaluate(() => window.rest.state);

    // Leaving: the event says we left ourselves.
    result.ended = await page.evaluate(
      () =>
        new Promise((resolve) => {
          window.room.on('ended', (err) => resolve(err ? err.code : null));
          window.room.leave();
        }),
    );
    result.afterLeave = await page.evaluate(() => ({ state: window.room.state, participants: window.room.participants.length }));
    emit('left');
  } finally {
    await browser.close().catch(() => {});
    app.close();
    api.close();
  }
  result.seconds = ((Date.now() - started) / 1000).toFixed(1);
  emit('done', { result });
}

main().then(
  () => process.exit(0),
  (e) => {
    emit('failed', { message: String((e && e.stack) || e) });
    process.exit(1);
  },
);
