// The SDK's example app (examples/sdk-app) in headless Chromium, served
// from another origin than the tutti server, for
// crates/server/tests/browser.rs: against a server that does not allow the
// page's origin, Join must show an error on the page naming the setting to
// add; against one that does, the page joins and lists the room.
//
// Input: one JSON argument {chromium, wav, refusedUrl, allowedUrl, people,
// waitMs}. Output: `@@{json}` lines as driver.js writes them: `done`
// (what each page showed) or `failed`.
'use strict';

const { emit, log, launch, until } = require('./driver.js');

const cfg = JSON.parse(process.argv[2]);

async function open(browser, url) {
  const page = await browser.newPage({ viewport: { width: 800, height: 600 } });
  page.on('console', (m) => log(`console.${m.type()}:`, m.text()));
  page.on('pageerror', (e) => log('page error:', e.message));
  await page.goto(url, { timeout: cfg.waitMs });
  return page;
}

const shown = (page) => page.evaluate(() => ({
  status: document.getElementById('status').textContent,
  error: document.getElementById('error').hidden ? '' : document.getElementById('error').textContent,
  people: [...document.querySelectorAll('#people li')].map((li) => li.textContent),
}));

async function main() {
  const browser = await launch(cfg.wav);
  try {
    const refused = await open(browser, cfg.refusedUrl);
    await refused.click('#join');
    await until(refused, 'the refused page shows an error', () => !document.getElementById('error').hidden);
    const refusedShown = await shown(refused);
    await refused.close();

    const allowed = await open(browser, cfg.allowedUrl);
    await allowed.click('#join');
    await until(allowed, 'the allowed page lists the room', (n) => document.querySelectorAll('#people li').length >= n, cfg.people);
    const allowedShown = await shown(allowed);
    emit('done', { refused: refusedShown, allowed: allowedShown });
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  emit('failed', { message: String(e && e.stack ? e.stack : e) });
  process.exitCode = 1;
});
