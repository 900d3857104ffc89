// The page on a phone, for crates/server/tests/browser.rs: a moderator's
// page and a guest's page, both 390 px wide (an iPhone 12-15), in one
// headless Chromium. The test has two Rust talkers in the room besides;
// the guest's name is long. On the moderator's page every participant's
// row (name, tags, actions) must stay inside the card, every button be a
// 44 px touch target and every name be shown whole; the first loads of both
// pages must log no error and fail no request; the guest must be told when
// the moderator mutes it; and when the server stops, the guest's page must
// say one thing: that the call ended.
//
// Input: one JSON argument {chromium, wav, out, hostUrl, guestUrl, people,
// waitMs}. Output: `@@{json}` lines as driver.js writes them: `ready`
// (the guest's participant id; the test then mutes it), `layout` (the
// moderator page's measures, its screenshot written as phone-moderator.png),
// `muted` (what the guest's page says), `stopping` (the test stops the
// server), `done` (what both pages said and logged), or `failed`.
'use strict';

const path = require('path');
const { emit, log, launch, state, until, command, endCommands } = require('./driver.js');

const cfg = JSON.parse(process.argv[2]);
const PHONE = { width: 390, height: 844 };

/** A page at phone width whose errors (console, page, failed requests) are kept. */
async function open(browser, name, url) {
  const errors = [];
  const page = await browser.newPage({ viewport: PHONE, hasTouch: true, isMobile: true });
  page.on('console', (m) => {
    log(`${name} console.${m.type()}:`, m.text());
    if (m.type() === 'error') errors.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  page.on('response', (r) => {
    if (r.status() >= 400) errors.push(`${r.status()} ${r.request().method()} ${new URL(r.url()).pathname}`);
  });
  page.on('requestfailed', (r) => errors.push(`failed ${r.method()} ${new URL(r.url()).pathname}: ${r.failure() && r.failure().errorText}`));
  await page.goto(url, { timeout: cfg.waitMs });
  return { page, errors };
}

const inCall = (n) => window.tuttiState && window.tuttiState.phase === 'in-call'
  && window.tuttiState.connection === 'connected' && (window.tuttiState.participants || []).length >= n;

/** What the banners say (empty when hidden). */
const banners = (page) => page.evaluate(() => ({
  error: document.getElementById('error').hidden ? '' : document.getElementById('error').textContent,
  notice: document.getElementById('notice').hidden ? '' : document.getElementById('notice').textContent,
}));

/** The moderator page's measures: what sticks out of the card, small buttons, hidden names. */
const measure = (page) => page.evaluate(() => {
  const card = document.getElementById('call-view').getBoundingClientRect();
  const outside = [];
  for (const el of document.querySelectorAll('#call-view *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.left < card.left - 0.5 || r.right > card.right + 0.5) {
      outside.push(`${el.tagName.toLowerCase()}.${el.className} "${(el.textContent || '').slice(0, 30)}" ${Math.round(r.left)}..${Math.round(r.right)} (card ${Math.round(card.left)}..${Math.round(card.right)})`);
    }
  }
  const small = [];
  for (const b of document.querySelectorAll('#call-view button')) {
    const r = b.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.height < 44 - 0.5 || r.width < 44 - 0.5) small.push(`"${b.textContent}" ${r.width.toFixed(0)}×${r.height.toFixed(0)}`);
  }
  const names = [...document.querySelectorAll('#participants .pname')].map((n) => ({
    name: n.textContent,
    width: Math.round(n.getBoundingClientRect().width),
    whole: n.scrollWidth <= n.clientWidth + 1 && n.scrollHeight <= n.clientHeight + 1,
  }));
  const actions = [...document.querySelectorAll('#participants .pactions button')].map((b) => b.textContent);
  return {
    pageWidth: document.documentElement.scrollWidth,
    viewport: window.innerWidth,
    outside,
    small,
    names,
    actions,
    rows: document.querySelectorAll('#participants li').length,
  };
});

async function main() {
  const browser = await launch(cfg.wav);
  try {
    // The banner's link of a fresh server: a room not made yet (joining makes it).
    const fresh = await open(browser, 'fresh', cfg.freshUrl);
    await until(fresh.page, 'the fresh page checked its access', () => window.tuttiState && window.tuttiState.access !== 'unknown');
    await new Promise((r) => setTimeout(r, 500));
    await fresh.page.close();
    const host = await open(browser, 'moderator', cfg.hostUrl);
    await host.page.click('#join');
    await until(host.page, 'the moderator is in the call', inCall, 1);
    const guest = await open(browser, 'guest', cfg.guestUrl);
    await guest.page.click('#join');
    await until(guest.page, 'the guest is in the call', inCall, cfg.people);
    await until(host.page, 'the moderator lists everyone', inCall, cfg.people);
    const firstLoad = { fresh: fresh.errors, moderator: [...host.errors], guest: [...guest.errors] };
    emit('ready', { guest: (await state(guest.page)).me });

    const layout = await measure(host.page);
    await host.page.screenshot({ path: path.join(cfg.out, 'phone-moderator.png'), fullPage: true });
    emit('layout', { layout });

    // The test mutes the guest now, as a moderator does.
    await until(guest.page, 'the guest is told it was muted', () => !document.getElementById('notice').hidden
      && /muted you/i.test(document.getElementById('notice').textContent));
    const muted = await banners(guest.page);
    await guest.page.screenshot({ path: path.join(cfg.out, 'phone-muted.png'), fullPage: true });
    emit('muted', { banners: muted, state: { muted: (await state(guest.page)).muted } });

    emit('stopping', {});
    await command('stopped', cfg.waitMs);
    await until(guest.page, 'the guest is told the call ended', () => !document.getElementById('error').hidden);
    // Whatever else comes, a moment later the page still says one thing.
    await new Promise((r) => setTimeout(r, 1500));
    const ended = await banners(guest.page);
    await guest.page.screenshot({ path: path.join(cfg.out, 'phone-ended.png'), fullPage: true });
    emit('done', { firstLoad, ended });
  } finally {
    endCommands();
    await browser.close();
  }
}

main().catch((e) => {
  emit('failed', { message: String(e && e.stack ? e.stack : e) });
  process.exitCode = 1;
});
