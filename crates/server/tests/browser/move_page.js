// One Chromium page in a call whose node drains, for the hand-over test of
// crates/server/tests/browser.rs: the page joins, hears the room, mutes
// itself; the test drains its node; the page must follow its room's
// `moved` to the other node on its own, still muted, and hear the room
// there; then it unmutes, so that the others can hear it again.
//
// Input: one JSON argument {chromium, wav, url, tones, measureMs, waitMs,
// out}. Output: `@@{json}` lines as driver.js writes them: `in_call`,
// `muted` (with what it heard), `moved` (its new address and state); for
// `measure` on stdin, `heard` (what it heard there); then `unmuted`; for
// `leave` on stdin, `done`; or `failed`. Every wait has a timeout.
'use strict';

const path = require('path');
const { emit, log, sleep, launch, state, until, tones, command, endCommands } = require('./driver.js');

const cfg = JSON.parse(process.argv[2]);


const inCall = () => window.tuttiState && window.tuttiState.phase === 'in-call' && window.tuttiState.connection === 'connected';
const brief = (s) => ({ room: s.room, muted: s.muted, hand: s.hand, admin: s.admin, me: s.me, phase: s.phase,
  participants: (s.participants || []).map((p) => ({ name: p.name, muted: p.muted })) });

async function main() {
  const browser = await launch(cfg.wav);
  try {
    const page = await browser.newPage({ viewport: { width: 900, height: 640 } });
    page.on('console', (m) => log(`console.${m.type()}:`, m.text()));
    page.on('pageerror', (e) => log('page error:', e.message));
    await page.goto(cfg.url, { timeout: cfg.waitMs });
    await page.click('#join');
    await until(page, 'alice is in the call', inCall);
    const first = new URL(page.url()).host;
    emit('in_call', { host: first });
    await sleep(1500);
    const before = await tones(page, cfg.tones, cfg.measureMs);
    await page.click('#mute');
    await until(page, 'alice muted', () => window.tuttiState.muted);
    emit('muted', { heard: before });

    // The test drains this page's node now: the page follows on its own.
    await page.waitForFunction(
      (first) => location.host !== first && window.tuttiState && window.tuttiState.phase === 'in-call' && window.tuttiState.connection === 'connected',
      first,
      { timeout: 30000, polling: 50 },
    );
    const after = new URL(page.url());
    emit('moved', { host: after.host, path: after.pathname, search: after.search, hasToken: after.hash.includes('token='), state: brief(await state(page)) });
    await page.screenshot({ path: path.join(cfg.out, 'moved.png') });

    await command('measure', 30000);
    const heard = await tones(page, cfg.tones, cfg.measureMs);
    emit('heard', { heard, state: brief(await state(page)) });
    await page.click('#mute');
    await until(page, 'alice unmuted', () => !window.tuttiState.muted);
    emit('unmuted');
    await command('leave', 30000);
    emit('done', { result: { before, heard } });
  } finally {
    endCommands();
    await browser.close();
  }
}

main().catch((e) => {
  emit('failed', { message: String(e && e.stack ? e.stack : e) });
  process.exitCode = 1;
});
