// One Chromium page moved to another room by an admin (a breakout), for
// the breakout test of crates/server/tests/browser.rs: the page joins room
// `main` with a token for `main` only, hears it; the test moves its
// participant to `side`; the page must follow on the same connection: its
// title, its participants and its address (`?room=side`) change, and it
// hears `side`.
//
// Input: one JSON argument {chromium, wav, url, to, tones, measureMs,
// waitMs, out}. Output: `@@{json}` lines as driver.js writes them:
// `before` (what it heard in the first room), `changed` (its address,
// title and state once it shows the new room), `done` (what it heard
// there), or `failed`. Every wait has a timeout.
'use strict';

const path = require('path');
const { emit, log, sleep, launch, state, until, tones } = require('./driver.js');

const cfg = JSON.parse(process.argv[2]);

const inCall = () => window.tuttiState && window.tuttiState.phase === 'in-call' && window.tuttiState.connection === 'connected';
const brief = (s) => ({ room: s.room, me: s.me, phase: s.phase, connection: s.connection,
  participants: (s.participants || []).map((p) => ({ id: p.id, name: p.name })) });

async function main() {
  const browser = await launch(cfg.wav);
  try {
    const page = await browser.newPage({ viewport: { width: 900, height: 640 } });
    page.on('console', (m) => log(`console.${m.type()}:`, m.text()));
    page.on('pageerror', (e) => log('page error:', e.message));
    await page.goto(cfg.url, { timeout: cfg.waitMs });
    await page.click('#join');
    await until(page, 'the page is in the call', inCall);
    await sleep(1500);
    const before = await tones(page, cfg.tones, cfg.measureMs);
    emit('before', { heard: before, state: brief(await state(page)) });

    // The test moves this page's participant now.
    await page.waitForFunction(
      (to) => window.tuttiState && window.tuttiState.room === to && (window.tuttiState.participants || []).length === 2,
      cfg.to,
      { timeout: 30000, polling: 50 },
    );
    const url = new URL(page.url());
    const title = await page.textContent('#room-title');
    emit('changed', { search: url.search, hasToken: url.hash.includes('token='), title, state: brief(await state(page)) });
    await page.screenshot({ path: path.join(cfg.out, 'breakout.png') });
    await sleep(1000);
    const heard = await tones(page, cfg.tones, cfg.measureMs);
    emit('done', { result: { before, heard }, state: brief(await state(page)) });
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  emit('failed', { message: String(e && e.stack ? e.stack : e) });
  process.exitCode = 1;
});
