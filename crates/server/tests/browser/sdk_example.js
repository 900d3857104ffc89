// The SDK's example app (examples/sdk-app) in headless Chromium, served
// from another origin than the tutti server, for
// crates/server/tests/browser.rs: against a server that does not allow the
// page's origin, Join must show an error on the page naming the setting to
// add; against one that does, the page joins and lists the room. Then the
// heart of an app from docs/api/sdk.md, as the docs print it (its server
// address the only change), on a page with an <audio> element: it joins,
// logs the participants' names, and what its <audio> plays is measured.
//
// Input: one JSON argument {chromium, wav, refusedUrl, allowedUrl, people,
// docUrl, docTones, waitMs}. Output: `@@{json}` lines as driver.js writes
// them: `done` (what each page showed) or `failed`.
'use strict';

const { emit, log, launch, until, tones } = require('./driver.js');

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

/** The docs' snippet: joins on load, logs names on every change. */
async function docSnippet(browser) {
  const page = await browser.newPage({ viewport: { width: 800, height: 600 } });
  const logged = [];
  page.on('console', async (m) => {
    // The values, not their preview: the snippet logs an array of names.
    const values = await Promise.all(m.args().map((a) => a.jsonValue().catch(() => null)));
    logged.push(JSON.stringify(values));
    log(`doc console.${m.type()}:`, JSON.stringify(values));
  });
  const errors = [];
  page.on('pageerror', (e) => {
    errors.push(e.message);
    log('doc page error:', e.message);
  });
  await page.goto(cfg.docUrl, { timeout: cfg.waitMs });
  await until(page, 'the docs snippet plays the room', () => {
    const a = document.querySelector('audio');
    return a && a.srcObject && a.srcObject.getAudioTracks().length > 0;
  });
  const end = Date.now() + cfg.waitMs;
  while (!logged.some((l) => l.includes(cfg.docTalker)) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 100));
  }
  const levels = await tones(page, cfg.docTones, 2000, 'audio');
  await page.close();
  return { logged, errors, levels };
}

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
    await allowed.close();
    const doc = await docSnippet(browser);
    emit('done', { refused: refusedShown, allowed: allowedShown, doc });
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  emit('failed', { message: String(e && e.stack ? e.stack : e) });
  process.exitCode = 1;
});
