// The README's first run, literally, for crates/server/tests/browser.rs:
// two headless Chromium browsers (each with a fake microphone playing its
// own tone). Browser B first opens the page without a token (it must say
// so); browser A opens the link `tutti serve` printed under "Open in a
// browser:", joins as "alice", and makes an invite link with the page's
// Invite control; browser B opens that link and joins as "bob". Then what
// each page hears is measured, and the first-run screenshots are written
// (`first-run-*.png` in cfg.out).
//
// Input: one JSON argument {chromium, out, link, noTokenUrl, pages: [{name,
// wav}, {name, wav}], tones, control, settleMs, measureMs, waitMs}. Output:
// `@@{json}` lines as driver.js writes them; one `done` with the result.
'use strict';

const path = require('path');
const { emit, log, sleep, launch, state, until, tones, transport } = require('./driver.js');

const cfg = JSON.parse(process.argv[2]);

async function open(browser, url) {
  const page = await browser.newPage({ viewport: { width: 900, height: 700 } });
  page.on('console', (m) => log(`console.${m.type()}:`, m.text()));
  page.on('pageerror', (e) => log('page error:', e.message));
  await page.goto(url, { timeout: cfg.waitMs });
  return page;
}

const shown = (page, id) => page.$eval(`#${id}`, (e) => (e.hidden ? '' : e.textContent || e.value || ''));
const shot = (page, name) => page.screenshot({ path: path.join(cfg.out, `first-run-${name}.png`), fullPage: true });

async function main() {
  const result = { pages: {} };
  const [a, b] = cfg.pages;
  const browsers = await Promise.all([launch(a.wav), launch(b.wav)]);
  result.chromium = browsers[0].version();
  try {
    // Someone who opens the page without the token is told what to open.
    const pageB = await open(browsers[1], cfg.noTokenUrl);
    await until(pageB, 'the page without a token says so', () => window.tuttiState.access === 'token_missing');
    result.noToken = { state: await state(pageB), shown: await shown(pageB, 'error') };
    await shot(pageB, '1-no-token');
    emit('no_token');

    // A token this server did not make (pasted into the same tab: only the fragment changes).
    await pageB.goto(`${cfg.noTokenUrl}#token=not.a.token`, { timeout: cfg.waitMs });
    await until(pageB, 'a made-up token is refused', () => window.tuttiState.access === 'token_invalid');
    result.refused = { state: await state(pageB), shown: await shown(pageB, 'error') };
    await shot(pageB, '1b-refused');
    // The banner's token (for demo) on another room's page.
    await pageB.goto(cfg.link.replace('?room=demo', '?room=elsewhere'), { timeout: cfg.waitMs });
    await until(pageB, 'another room’s token is told', () => window.tuttiState.access === 'wrong_room');
    result.wrongRoom = { state: await state(pageB), shown: await shown(pageB, 'error') };
    await shot(pageB, '1c-wrong-room');

    // The banner's link: room `demo` filled in, the token taken from the fragment.
    const pageA = await open(browsers[0], cfg.link);
    await until(pageA, 'the link’s token is accepted', () => window.tuttiState.access === 'ok');
    result.linkForm = {
      room: await pageA.$eval('#room', (e) => e.value),
      tokenField: (await pageA.$eval('#token', (e) => e.value)).length,
      url: pageA.url(),
    };
    await pageA.fill('#name', a.name);
    await shot(pageA, '2-banner-link');
    await pageA.click('#join');
    const connected = () => window.tuttiState.phase === 'in-call' && window.tuttiState.connection === 'connected';
    await until(pageA, 'alice in the call', connected);
    emit('a_connected');

    // The moderator's Invite control: the server mints a guest token; the page shows and copies the link.
    await until(pageA, 'the Invite control shows', () => !document.getElementById('invite-box').hidden);
    await pageA.click('#invite');
    await until(pageA, 'the invite link is made', () => !!(window.tuttiState.invite && window.tuttiState.invite.url));
    const invite = await pageA.$eval('#invite-link', (e) => e.value);
    result.invite = {
      link: invite,
      state: (await state(pageA)).invite,
      status: await shown(pageA, 'invite-status'),
    };
    await shot(pageA, '3-invite');
    emit('invited');

    // The guest opens the invite link (the same browser B, as a person would) and joins.
    await pageB.goto(invite, { timeout: cfg.waitMs });
    await until(pageB, 'the invite’s token is accepted', () => window.tuttiState.access === 'ok');
    await pageB.fill('#name', b.name);
    await pageB.click('#join');
    await until(pageB, 'bob in the call', connected);
    emit('b_connected');
    const both = () => window.tuttiState.participants.length === 2;
    await Promise.all([until(pageA, 'alice lists two', both), until(pageB, 'bob lists two', both)]);
    // What is on screen (not just the attribute: a display rule could beat `hidden`).
    result.guestSeesInvite = await pageB.isVisible('#invite-box');
    result.guestSeesAdminBar = await pageB.isVisible('#admin-bar');
    result.hostSeesInvite = await pageA.isVisible('#invite-box');
    result.guestAdmin = (await state(pageB)).admin;

    await sleep(cfg.settleMs);
    emit('measure_start');
    const freqs = [...cfg.tones, cfg.control];
    const [heardA, heardB] = await Promise.all([tones(pageA, freqs, cfg.measureMs), tones(pageB, freqs, cfg.measureMs)]);
    emit('measure_end');
    for (const [page, p, heard] of [
      [pageA, a, heardA],
      [pageB, b, heardB],
    ]) {
      const s = await state(page);
      delete s.offerSdp;
      delete s.answerSdp;
      result.pages[p.name] = { heard, state: s, transport: await transport(page) };
    }
    await shot(pageA, '4-call-host');
    await shot(pageB, '5-call-guest');
  } finally {
    await Promise.all(browsers.map((br) => br.close().catch(() => {})));
  }
  emit('done', { result });
}

main().catch((e) => {
  log('failed:', e && e.stack ? e.stack : e);
  emit('failed', { message: String(e && e.message ? e.message : e) });
  process.exit(1);
});
