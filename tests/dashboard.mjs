// dashboard.mjs — browser test of the dashboard against a running server:
//   node tests/dashboard.mjs BASE_URL
// with TOKEN_READ, DONE_RUN (a succeeded run whose step "train" ran twice and has metrics),
// LIVE_RUN (a pending run that the caller takes to succeeded once this prints FOLLOWING) and
// SHOTS (the screenshot folder) in the environment. Drives Debian's /usr/bin/chromium with
// playwright-core; asserts on the DOM against what the API answers. Exits 0 or 1.
import { chromium } from 'playwright-core';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const base = process.argv[2];
const { TOKEN_READ: tok, DONE_RUN: done, LIVE_RUN: live, SHOTS: shots } = process.env;
const failures = [];
const check = (ok, what) => { if (!ok) { failures.push(what); console.error('FAIL ' + what); } };
const api = async (path) =>
  (await fetch(base + path, { headers: { Authorization: 'Bearer ' + tok } })).json();

mkdirSync(shots, { recursive: true });
const profile = mkdtempSync(join(tmpdir(), 'tpuflow-chromium-'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run'],
  viewport: { width: 1200, height: 800 },
});
const page = ctx.pages()[0] || await ctx.newPage();
const errors = [];
page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
page.on('pageerror', (e) => errors.push(String(e)));

const rowsOf = () => page.$$eval('table.runs tbody tr', (trs) => trs.map((tr) => ({
  id: tr.dataset.run, state: tr.querySelector('[data-state]').dataset.state })));
const sameRows = (rows, items, what) => {
  check(rows.length === items.length, `${what}: ${rows.length} rows shown, the API has ${items.length}`);
  items.forEach((it, i) => check(rows[i] && rows[i].id === it.id && rows[i].state === it.state,
    `${what}: row ${i} shows ${JSON.stringify(rows[i])}, the API ${it.id} ${it.state}`));
};

try {
  // The page shell: its CSP, then sign-in.
  const res = await page.goto(base + '/');
  const csp = res.headers()['content-security-policy'] || '';
  check(csp.includes("default-src 'self'") && !csp.includes('unsafe-inline'),
    `the page's CSP is "${csp}"`);
  await page.waitForSelector('form.signin');
  await page.fill('#token', tok);
  await page.press('#token', 'Enter'); // keyboard only
  await page.waitForSelector('table.runs, p.empty');
  sameRows(await rowsOf(), (await api('/api/v1/runs?limit=50')).items, 'runs list');
  await page.screenshot({ path: join(shots, 'runs.png'), fullPage: true });

  // A filter is part of the URL, and the list follows it.
  await page.selectOption('#f-state', 'succeeded');
  await page.click('form.filters button');
  await page.waitForFunction(() => location.hash.includes('state=succeeded'));
  await page.waitForFunction(() => [...document.querySelectorAll('table.runs tbody [data-state]')]
    .every((e) => e.dataset.state === 'succeeded'));
  sameRows(await rowsOf(), (await api('/api/v1/runs?limit=50&state=succeeded')).items,
    'state=succeeded');

  // Cursor pages: two runs a page, the second page by the Next link.
  await page.goto(base + '/#/runs?limit=2');
  await page.waitForFunction(() => document.querySelectorAll('table.runs tbody tr').length === 2);
  const first = await api('/api/v1/runs?limit=2');
  sameRows(await rowsOf(), first.items, 'page 1');
  const firstId = first.items[0].id;
  await page.click('a[rel=next]');
  await page.waitForFunction((id) => !document.querySelector(`tr[data-run="${id}"]`), firstId);
  sameRows(await rowsOf(), (await api(first.next)).items, 'page 2');

  // A finished run: its step, attempts and metrics.
  await page.goto(base + '/#/runs/' + done);
  await page.waitForSelector('tr[data-step=train]');
  const step = await page.$eval('tr[data-step=train]', (tr) => ({
    state: tr.querySelector('[data-state]').dataset.state,
    attempts: tr.children[3].firstChild.textContent,
    metrics: tr.querySelector('dl.metrics')?.textContent || '' }));
  const want = (await api('/api/v1/runs/' + done)).steps[0];
  check(step.state === want.state && step.state === 'succeeded', `step state ${step.state}`);
  check(step.attempts === String(want.attempts) && want.attempts === 2, `attempts ${step.attempts}`);
  check(step.metrics.includes('accuracy0.875') && step.metrics.includes('loss0.25'),
    `metrics shown: ${step.metrics}`);
  check(await page.$eval('[data-live]', (e) => e.dataset.live) === 'off', 'a final run is not followed');
  await page.screenshot({ path: join(shots, 'run.png'), fullPage: true });

  // A live run: the page follows it to its end without a reload.
  await page.goto(base + '/#/runs/' + live);
  await page.waitForSelector('[data-live=on]');
  await page.evaluate(() => { window.sameDocument = true; });
  console.log('FOLLOWING');
  await page.waitForSelector('h1 [data-state=succeeded]', { timeout: 30000 });
  await page.waitForSelector('tr[data-step=train] [data-state=succeeded]');
  check(await page.$eval('[data-live]', (e) => e.dataset.live) === 'off', 'the ended run is still followed');
  check(await page.evaluate(() => window.sameDocument === true), 'the page reloaded');
  await page.screenshot({ path: join(shots, 'run-live-ended.png'), fullPage: true });

  // Signing out forgets the token.
  await page.click('#signout');
  await page.waitForSelector('form.signin');
  check(await page.evaluate(() => sessionStorage.getItem('tpuflow.token')) === null,
    'the token is still in sessionStorage after signing out');
} catch (e) {
  failures.push(String(e));
  console.error('FAIL ' + e);
  await page.screenshot({ path: join(shots, 'failure.png'), fullPage: true }).catch(() => {});
}
check(errors.length === 0, 'console errors: ' + errors.join(' | '));
await ctx.close();
rmSync(profile, { recursive: true, force: true });
console.log(failures.length ? `dashboard: ${failures.length} failure(s)` : 'dashboard: ok');
process.exit(failures.length ? 1 : 0);
