// dashboard.mjs — the dashboard in Debian's /usr/bin/chromium (playwright-core) against a
// real daemon that holds real runs; run by tests/it_dashboard.sh:
//   node tests/dashboard.mjs auth   (URL, READ, TRIGGER, ADMIN tokens, the runs DEMO, FLAKY,
//                                    WIDE, VICTIM, URGENT, and SHOTS in the environment)
//   node tests/dashboard.mjs none   (a daemon started with --no-auth)
// Every assertion compares the DOM with what the API answers. No console error and a CSP on
// every page are checked throughout. Exits 0 or 1.
import { chromium } from 'playwright-core';
import { appendFileSync, existsSync, mkdtempSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { execFileSync, spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const mode = process.argv[2];
const E = process.env;
const base = E.URL;
const failures = [];
const check = (ok, what) => { if (!ok) { failures.push(what); console.error('FAIL ' + what); } };
const api = async (path, tok = E.ADMIN, init = {}) => {
  const headers = { ...(init.headers || {}) };
  if (tok) headers.Authorization = 'Bearer ' + tok;
  const r = await fetch(base + path, { ...init, headers });
  return (r.headers.get('content-type') || '').includes('json') ? r.json() : r.text();
};
const waitFor = async (fn, what, ms = 60000) => {
  for (const t0 = Date.now(); Date.now() - t0 < ms;) {
    if (await fn().catch(() => false)) return true;
    await new Promise((r) => setTimeout(r, 200));
  }
  check(false, 'timed out waiting for ' + what);
  return false;
};

mkdirSync(E.SHOTS, { recursive: true });
const profile = mkdtempSync(join(tmpdir(), 'tpuflow-chromium-'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium', headless: true, acceptDownloads: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run'],
  viewport: { width: 1280, height: 900 },
  timezoneId: 'Asia/Kolkata', locale: 'en-US', // a zone neither UTC nor whole hours off it
});
const page = ctx.pages()[0] || await ctx.newPage();
const errors = [];
const watch = (p) => {
  p.on('console', (m) => { if (m.type() === 'error') errors.push(m.text() + ' (' + (m.location().url || '?') + ')'); });
  p.on('pageerror', (e) => errors.push(String(e)));
};
watch(page);
// What the browser says of requests the test makes fail on purpose (a daemon stopped, a
// token expired) is expected: dropped from the errors from index `from` on.
const expected = (from, re) => errors.splice(from, errors.length - from, ...errors.slice(from).filter((m) => !re.test(m)));
const submitYaml = (yaml) => api('/api/v1/runs', E.TRIGGER, { method: 'POST',
  headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ yaml }) });
let pages = 0;
page.on('response', (r) => { // the CSP on every page and every file of it
  if (!['document', 'script', 'stylesheet'].includes(r.request().resourceType())) return;
  pages++;
  const csp = r.headers()['content-security-policy'] || '';
  check(csp.includes("default-src 'self'") && !csp.includes('unsafe'), `CSP of ${r.url()}: "${csp}"`);
});
// Starts the daemon again on the same port (its pid goes to PIDS for the script's clean-up);
// the previous one may still be letting go of the home's lock, so a start that exits at once
// is tried again.
async function startDaemon(port) {
  for (let i = 0; i < 50; i++) {
    const log = openSync(E.DAEMON_LOG, 'a');
    const d = spawn(E.BIN, ['daemon', '--home', E.HOME_DIR, '--listen', '127.0.0.1:' + port, '--grace', '5s'],
      { stdio: ['ignore', log, log] });
    appendFileSync(E.PIDS, d.pid + '\n');
    let exited = false;
    d.on('exit', () => { exited = true; });
    for (let t = 0; t < 100 && !exited && !existsSync(E.HOME_DIR + '/daemon.json'); t++)
      await new Promise((r) => setTimeout(r, 100));
    if (!exited && existsSync(E.HOME_DIR + '/daemon.json')) { d.unref(); return; }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error('the daemon did not start again');
}
const shot = (name) => page.screenshot({ path: join(E.SHOTS, name), fullPage: true });
const go = async (hash) => { await page.goto(base + '/' + hash); };
const attr = (sel, name) => page.$eval(sel, (e, n) => e.getAttribute(n), name);
const all = (sel, fn) => page.$$eval(sel, fn);

async function signIn(tok) {
  await go('#/runs');
  if (!(await page.$('form.signin'))) { await page.click('#signout'); }
  await page.waitForSelector('form.signin');
  await page.fill('#token', tok);
  await page.press('#token', 'Enter'); // keyboard only
  await page.waitForSelector('.trigger[data-scope]', { state: 'attached' });
}

async function runsList(tok) {
  const want = await api('/api/v1/runs?limit=50', tok);
  const rows = await all('table.runs tbody tr', (trs) => trs.map((tr) => ({ id: tr.dataset.run,
    state: tr.querySelector('[data-state]').dataset.state,
    trigger: tr.querySelector('[data-trigger]').dataset.trigger })));
  check(rows.length === want.items.length, `runs list: ${rows.length} rows, the API has ${want.items.length}`);
  // times in the viewer's zone, named; the instant in UTC on hover
  const first = want.items[0], t = first.created_at;
  const ist = new Date((t + 5.5 * 3600) * 1000), two = (n) => String(n).padStart(2, '0');
  const clock = `${ist.getUTCHours() % 12 || 12}:${two(ist.getUTCMinutes())}:${two(ist.getUTCSeconds())}`;
  const [shown, title] = await page.$eval('table.runs tbody tr time', (e) => [e.textContent, e.title]);
  check(shown.includes(clock) && shown.includes('GMT+5:30') && title === new Date(t * 1000).toISOString(),
    `run ${first.id} created ${shown} (title ${title}); in Asia/Kolkata it is ${clock}`);
  // how many runs there are, as the API counts them
  const count = await page.$eval('p.count', (e) => [+e.dataset.total, e.textContent]);
  check(count[0] === want.total && want.total >= want.items.length && count[1].startsWith(want.total.toLocaleString('en-US') + ' runs'),
    `the runs count says ${count[1]} (${count[0]}), the API's total is ${want.total}`);
  want.items.forEach((it, i) => check(rows[i] && rows[i].id === it.id && rows[i].state === it.state &&
    rows[i].trigger === (it.trigger || ''), `runs list row ${i}: ${JSON.stringify(rows[i])} vs ${it.id} ${it.state} ${it.trigger}`));
  return want;
}

// WCAG contrast of the text of the elements sel matches against what is behind it (an SVG
// node's own box, else the nearest ancestor with a background): those under 4.5:1.
const lowContrast = (sel) => page.$$eval(sel, (els) => {
  const rgb = (c) => { // rgb()/rgba(), or color(srgb r g b) for a color-mix()
    let m = c.match(/^rgba?\(([^)]+)\)/);
    if (m) { const v = m[1].split(/[ ,/]+/).map(Number); return [v[0] / 255, v[1] / 255, v[2] / 255, v.length > 3 ? v[3] : 1]; }
    m = c.match(/^color\(srgb ([^)]+)\)/);
    if (m) { const v = m[1].trim().split(/[ /]+/).map(Number); return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; }
    return null;
  };
  const lum = ([r, g, b]) => [r, g, b].map((c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4))
    .reduce((t, c, i) => t + c * [0.2126, 0.7152, 0.0722][i], 0);
  const behind = (e) => {
    const node = e.closest('svg .node');
    if (node) return rgb(getComputedStyle(node.querySelector('.box')).fill);
    for (let x = e; x; x = x.parentElement) { const c = rgb(getComputedStyle(x).backgroundColor); if (c && c[3] > 0) return c; }
    return [1, 1, 1, 1];
  };
  return els.filter((e) => e.textContent.trim()).map((e) => {
    const fg = rgb(e instanceof SVGElement ? getComputedStyle(e).fill : getComputedStyle(e).color), bg = behind(e);
    if (!fg || !bg) return `"${e.textContent.slice(0, 30)}": colours not read`;
    const [x, y] = [lum(fg), lum(bg)].sort((p, q) => q - p);
    const r = (x + 0.05) / (y + 0.05);
    return r < 4.5 ? `"${e.textContent.slice(0, 30)}" ${r.toFixed(2)}:1` : null;
  }).filter(Boolean);
});

// The graph's nodes and the API's steps agree (state, attempts); returns the run document.
async function graphMatches(id, tok) {
  const run = await api('/api/v1/runs/' + id, tok);
  await page.waitForSelector('svg.dag .node');
  const nodes = new Map((await all('svg.dag .node[data-step]', (els) => els.map((e) =>
    [e.dataset.step, { state: e.dataset.state, attempts: +e.dataset.attempts,
      skipped: e.classList.contains('skipped'), text: e.textContent, line: e.querySelector('text.small').textContent }]))));
  for (const st of run.steps) {
    const n = nodes.get(st.name);
    if (!n) continue; // inside a collapsed level
    check(n.state === st.state && n.attempts === st.attempts,
      `graph node ${st.name}: ${n.state}/${n.attempts}, the API ${st.state}/${st.attempts}`);
    check(n.skipped === (st.state === 'skipped'), `graph node ${st.name} skipped mark`);
    // the state in words as well as in colour; "when" only for a step its gate skipped
    check(n.line.includes(st.state), `graph node ${st.name} reads "${n.line}", its state is ${st.state}`);
    check(!n.line.includes('when') || /when/.test(st.reason || ''), `graph node ${st.name} reads "${n.line}" (${st.reason})`);
    if (st.attempts > 1) check(n.text.includes('↻' + (st.attempts - 1)), `graph node ${st.name} counts its retries`);
  }
  // each node is filled with its state's colour (not the plain card colour of a collapsed
  // level), and steps in different states differ
  const fills = await all('svg.dag .node[data-step]', (els) => els.map((e) =>
    [e.dataset.state, getComputedStyle(e.querySelector('.box')).fill]));
  const card = await page.$eval('header.top', (e) => getComputedStyle(e).backgroundColor);
  const byState = new Map();
  for (const [st, fill] of fills) {
    check(fill !== card && fill !== 'none', `graph node in state ${st} drawn without its colour (${fill})`);
    byState.set(st, (byState.get(st) || new Set()).add(fill));
  }
  for (const [st, set] of byState) check(set.size === 1, `graph nodes in state ${st} have ${set.size} colours`);
  if (byState.has('succeeded') && byState.has('failed'))
    check([...byState.get('succeeded')][0] !== [...byState.get('failed')][0], 'succeeded and failed nodes look alike');
  const bars = await all('svg.gantt rect[data-attempt]', (r) => r.length);
  const attempts = run.steps.reduce((t, st) => t + st.attempts_detail.length, 0);
  check(bars === attempts, `timeline: ${bars} bars, ${attempts} attempts`);
  const ticks = await all('svg.gantt text.tick', (t) => t.map((x) => x.textContent));
  check(ticks.length === 5 && new Set(ticks).size === 5, `timeline axis ticks tell apart: ${ticks}`);
  // steps done counted as the API counts them (succeeded or cached), failed and skipped beside
  const n = (...states) => run.steps.filter((st) => states.includes(st.state)).length;
  const dd = await page.$eval('[data-done]', (e) => [+e.dataset.done, +e.dataset.failed, +e.dataset.skipped]);
  check(JSON.stringify(dd) === JSON.stringify([n('succeeded', 'cached'), n('failed'), n('skipped')]),
    `steps done ${dd}, the API's steps ${run.steps.map((st) => st.state)}`);
  check((await page.title()).includes(run.id), `the tab's title names the run: ${await page.title()}`);
  for (const scheme of ['dark', 'light']) { // text against what is behind it, both schemes
    await page.emulateMedia({ colorScheme: scheme });
    const low = await lowContrast('svg.dag text, svg.gantt text, .state, .muted, .error, main a, main td, main th, main dt, main dd');
    check(low.length === 0, `run ${run.id} (${scheme}): text under 4.5:1: ${[...new Set(low)].slice(0, 8)}`);
  }
  const head = await page.$eval('main > div:first-child', (e) => e.innerText);
  check(!/null|undefined/.test(head), `the run's heading reads ${JSON.stringify(head)}`);
  return run;
}

// The dashboard's Server-Sent Events reader (web/ui/sse.js) against the cases of the HTML
// standard's event stream interpretation: [what, the text in the reads it comes in, the
// events [name, data] it makes, then lastId and retry when the case says them].
const SSE_CASES = [
  ['data lines joined with a newline', ['data: a\ndata: b\n\n'], [['message', 'a\nb']]],
  ['CRLF line ends', ['event: run\r\ndata: {"x":1}\r\n\r\n'], [['run', '{"x":1}']]],
  ['CR line ends', ['data: c\r\r'], [['message', 'c']]],
  ['a CRLF cut between two reads is one line end', ['data: 1\r', '\ndata: 2\r\n', '\r\n'], [['message', '1\n2']]],
  ['one space after the colon removed, no more', ['data:  two\ndata:x\n\n'], [['message', ' two\nx']]],
  ['comments and unknown fields ignored, a bare name is an empty value', [': hi\nfoo: bar\ndata\ndata\n\n'], [['message', '\n']]],
  ['no data, no event; id and retry kept', ['id: 7\nretry: 10000\n\nevent: end\n\n'], [], '7', 10000],
  ['a bare id clears it, a retry not all digits is ignored', ['id: 7\n\nid\nretry: 1s\ndata: z\n\n'], [['message', 'z']], '', null],
  ['an unfinished event waits for its blank line', ['data: held\n'], []],
];
async function sseChecks() {
  const src = readFileSync(new URL('../web/ui/sse.js', import.meta.url), 'utf8');
  const { sseReader } = await import('data:text/javascript,' + encodeURIComponent(src));
  for (const [what, reads, want, lastId, retry] of SSE_CASES) {
    const got = [];
    const r = sseReader((name, data) => got.push([name, data]));
    for (const t of reads) r.push(t);
    check(JSON.stringify(got) === JSON.stringify(want) && (lastId === undefined || r.lastId === lastId) &&
      (retry === undefined || r.retry === retry),
    `SSE ${what}: ${JSON.stringify(reads)} made ${JSON.stringify(got)} (id ${JSON.stringify(r.lastId)}, retry ${r.retry})`);
  }
}

// Progress lines of a train step's log, as the API serves them: the points each curve must have.
async function expectedPoints(id, step, tok) {
  const text = await api(`/api/v1/runs/${id}/steps/${step}/logs`, tok);
  const steps = { auc: new Set(), loss: 0 };
  const series = { step: new Set(), epochTrain: new Set(), epochEval: new Set() };
  for (const l of text.split('\n')) {
    if (!l.startsWith('{')) continue;
    const ev = JSON.parse(l);
    if (ev.event === 'epoch') { steps.auc.add(ev.step); series.epochTrain.add(ev.step); series.epochEval.add(ev.step); }
    if (ev.event === 'step' && typeof ev.loss === 'number') series.step.add(ev.step);
  }
  return { auc: steps.auc.size, loss: series.step.size + series.epochTrain.size + series.epochEval.size, text };
}

// The runs list sorted from its column headers (GET /api/v1/runs?sort=): each click is in the
// URL and sorts as the API does, a second click the other way, a reload keeps the order, and
// the pages of a small page size, walked with Next page, meet every run once in the API's order.
async function sortChecks() {
  const ids = () => all('table.runs tbody tr', (trs) => trs.map((t) => t.dataset.run));
  const sorted = () => page.$eval('th[aria-sort]', (e) => [e.textContent.replace(/[ ▲▼]/g, ''), e.getAttribute('aria-sort')]);
  await go('#/runs');
  await page.waitForSelector('table.runs tbody tr');
  check(JSON.stringify(await sorted()) === '["Created","descending"]', `the list opens sorted ${await sorted()}`);
  for (const [col, want, dir] of [['Duration', '-duration', 'descending'], ['Duration', 'duration', 'ascending'],
    ['Pipeline', 'pipeline', 'ascending'], ['State', 'state', 'ascending'], ['State', '-state', 'descending'],
    ['Created', '-created', 'descending'], ['Created', 'created', 'ascending']]) {
    await page.click(`table.runs thead th:has-text("${col}") a`);
    // the default order (newest first) is the URL without sort
    await page.waitForFunction((w) => new URLSearchParams(location.hash.split('?')[1]).get('sort') ===
      (w === '-created' ? null : w), want);
    await page.waitForSelector(`th[data-sort="${want}"]`);
    const api1 = await api(`/api/v1/runs?sort=${want}&limit=50`, E.READ);
    const got = await ids();
    check(JSON.stringify(got) === JSON.stringify(api1.items.map((r) => r.id)),
      `sorted by ${want}: the list shows ${got}, the API ${api1.items.map((r) => r.id)}`);
    check(JSON.stringify(await sorted()) === JSON.stringify([col, dir]), `sorted by ${want}: the header says ${await sorted()}`);
  }
  // the order survives a reload (it is in the URL), and pages of two follow it to the end
  await go('#/runs?sort=-duration&limit=2');
  await page.reload();
  await page.waitForSelector('th[data-sort="-duration"]');
  const whole = (await api('/api/v1/runs?sort=-duration&limit=500', E.READ)).items.map((r) => r.id);
  const walked = [];
  for (let i = 0; i < 100; i++) {
    await page.waitForSelector('table.runs tbody tr');
    walked.push(...await ids());
    const next = await page.$('a[rel=next]');
    if (!next) break;
    const before = JSON.stringify(await ids());
    await next.click();
    await page.waitForFunction((b) => JSON.stringify([...document.querySelectorAll('table.runs tbody tr')]
      .map((t) => t.dataset.run)) !== b && document.querySelector('th[data-sort="-duration"]'), before);
  }
  check(JSON.stringify(walked) === JSON.stringify(whole),
    `pages of 2 sorted -duration met ${walked}, the API's whole list is ${whole}`);
  check((await page.$eval('table.runs caption', (e) => e.textContent)).includes('longest first'), 'the caption names the order');
  await shot('runs-sorted.png');
}

async function authPass() {
  // ---- read: every view, no action offered
  await signIn(E.READ);
  check(await attr('.trigger', 'data-scope') === 'read', 'whoami scope read');
  check(!(await page.$('.trigger details')), 'a read token is offered the trigger form');
  await runsList(E.READ);
  await shot('runs.png');
  // text search and a filter, in the URL
  await page.fill('#f-q', 'flaky');
  await page.selectOption('#f-trigger', 'api');
  await page.click('form.filters button');
  await page.waitForFunction(() => location.hash.includes('q=flaky') && location.hash.includes('trigger=api'));
  await page.waitForFunction(() => [...document.querySelectorAll('table.runs tbody tr')].every((tr) => tr.children[2].textContent === 'flaky'));
  const f = await api('/api/v1/runs?q=flaky&trigger=api', E.READ);
  // filters that match nothing say so, with the way back to every run
  await go('#/runs?q=no-run-has-this-text');
  await page.waitForSelector('p.empty');
  check((await page.$eval('p.empty', (e) => e.textContent)).includes('No run matches') &&
    await page.$eval('p.empty a', (e) => e.getAttribute('href')) === '#/runs', 'the empty filtered list');
  await page.goBack();
  await page.waitForFunction(() => location.hash.includes('q=flaky'));
  await page.waitForSelector('table.runs tbody tr');
  const ids = await all('table.runs tbody tr', (trs) => trs.map((t) => t.dataset.run));
  check(JSON.stringify(ids) === JSON.stringify(f.items.map((r) => r.id)) && ids.includes(E.FLAKY),
    `search q=flaky&trigger=api shows ${ids}, the API ${f.items.map((r) => r.id)}`);
  const fcount = await page.$eval('p.count', (e) => [+e.dataset.total, e.textContent]);
  check(fcount[0] === f.total && fcount[1] === (f.total === 1 ? '1 run matches these filters' : `${f.total} runs match these filters`),
    `the filtered count says ${fcount[1]}, the API's total is ${f.total}`);
  // where the API stopped counting (its total_exact false, past 1,000 runs) the count says
  // "1,000+": the pages' answers are the API's with that total, here
  const bounded = (u) => u.pathname === '/api/v1/runs';
  const atBound = async (route) => {
    const r = await route.fetch();
    await route.fulfill({ response: r, json: { ...(await r.json()), total: 1000, total_exact: false } });
  };
  const five = (await api('/api/v1/runs?limit=5', E.READ)).items.length;
  await page.route(bounded, atBound);
  for (const [hash, want] of [['#/runs?limit=5', `1,000+ runs, ${five} on this page`],
    ['#/runs?q=flaky&trigger=api', `1,000+ runs match these filters, ${f.items.length} on this page`]]) {
    await go(hash);
    await page.waitForFunction((w) => document.querySelector('p.count')?.textContent === w, want,
      { timeout: 15000 }).catch(() => {});
    const said = await page.$eval('p.count', (e) => [e.dataset.exact, e.textContent]).catch(() => []);
    check(said[0] === 'false' && said[1] === want, `the count past the API's bound says ${said[1]} on ${hash}, want ${want}`);
  }
  await page.unroute(bounded, atBound);

  await sortChecks();

  // a run opened from the list with the keyboard: focus moves to the run page's content, and
  // the next Tab reaches its first link (not the top of the document, or nothing)
  await go('#/runs');
  await page.focus(`table.runs a[href="#/runs/${E.DEMO}"]`);
  await page.keyboard.press('Enter');
  await page.waitForSelector('svg.dag .node');
  check(await page.evaluate(() => document.activeElement.id) === 'main', 'focus after opening a run with Enter');
  await page.keyboard.press('Tab');
  check(await page.evaluate(() => document.activeElement.getAttribute('href')) === '#/runs',
    `Tab from the run page's top reaches ${await page.evaluate(() => document.activeElement.outerHTML.slice(0, 80))}`);

  // the demo: graph, timeline, curves as many points as progress lines, checkpoints, log tools
  await go('#/runs/' + E.DEMO);
  const demo = await graphMatches(E.DEMO, E.READ);
  check(await page.$$('[data-action]').then((b) => b.length) === 0, 'a read token is offered actions');
  // every param with the value the run used, given (epochs=1) or its default, as the API says
  const pv = await all('dl.facts [data-param-value]', (e) => e.map((d) => [d.dataset.paramValue, d.dataset.source, d.firstChild.textContent]));
  check(demo.param_values.length > 1 && demo.param_values.some((p) => p.name === 'epochs' && p.source === 'param') &&
    JSON.stringify(pv) === JSON.stringify(demo.param_values.map((p) => [p.name, p.source, p.text ?? 'unset'])),
  `params shown ${JSON.stringify(pv)}, the API's ${JSON.stringify(demo.param_values)}`);
  await page.waitForSelector('pre.log[data-ended]');
  const want = await expectedPoints(E.DEMO, 'train', E.READ);
  await waitFor(async () => +(await attr('[data-curve=auc]', 'data-points')) === want.auc &&
    +(await attr('[data-curve=loss]', 'data-points')) === want.loss, 'the demo curves');
  check(want.auc >= 1 && +(await attr('[data-curve=auc]', 'data-points')) === want.auc,
    `AUC curve points ${await attr('[data-curve=auc]', 'data-points')}, the log has ${want.auc}`);
  check(+(await attr('[data-curve=loss]', 'data-points')) === want.loss, `loss curve points, the log has ${want.loss}`);
  // every drawn curve's value axis tells its ticks apart (an AUC axis near 1 read "1 1 1")
  for (const [curve, ticks] of await all('.curve:not([hidden])[data-y-ticks]', (e) => e.map((x) => [x.dataset.curve, x.dataset.yTicks])))
    check(new Set(ticks.split(' ')).size === ticks.split(' ').length, `the ${curve} axis reads ${ticks}`);
  const ck = await api(`/api/v1/runs/${E.DEMO}/steps/train/checkpoints`, E.READ);
  await page.waitForSelector('.checkpoints [data-count]');
  check(ck.items.length >= 1 && +(await attr('.checkpoints [data-count]', 'data-count')) === ck.items.length,
    `checkpoints shown vs ${ck.items.length}`);
  const metrics = await page.$eval('.step-metrics', (e) => e.textContent);
  const train = demo.steps.find((s) => s.name === 'train');
  check(metrics.includes('accuracy') && metrics.includes(Number(train.metrics.accuracy.toPrecision(4)).toLocaleString('en-US')),
    `train metrics shown: ${metrics}`);
  await page.fill('.logs input[type=search]', '"event":"epoch"');
  const hits = want.text.split('\n').filter((l) => l.includes('"event":"epoch"')).length;
  await waitFor(async () => +(await attr('pre.log', 'data-matches')) === hits, 'log search');
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('.logs button')]);
  check(dl.suggestedFilename() === `${E.DEMO}-train.log` && statSync(await dl.path()).size > 0,
    `download ${dl.suggestedFilename()}`);
  await page.fill('.logs input[type=search]', '');
  await shot('run.png');
  await page.screenshot({ path: join(E.SHOTS, 'readme-run.png'), fullPage: true,
    clip: { x: 0, y: 0, width: 1280, height: 1700 } });

  // the first page of runs keeps itself current from the event stream started from now
  // (?after=latest): no request for the list while nothing happens, a run made through the
  // API appears and turns succeeded without a reload
  const asks = [];
  const onAsk = (r) => asks.push({ path: new URL(r.url()).pathname, after: new URL(r.url()).searchParams.get('after'),
    lastId: r.headers()['last-event-id'] });
  page.on('request', onAsk);
  await go('#/runs');
  await page.waitForSelector('table.runs');
  await page.waitForSelector('h1 [data-live=on]');
  await page.evaluate(() => { window.sameDocument = true; });
  const listAsks = () => asks.filter((a) => a.path === '/api/v1/runs').length;
  const streams = () => asks.filter((a) => a.path === '/api/v1/events');
  const before = listAsks();
  await new Promise((r) => setTimeout(r, 4000)); // longer than any polling period would be
  check(listAsks() === before, `the runs page asked for the list ${listAsks() - before} time(s) while nothing happened`);
  check(streams().length === 1 && streams()[0].after === 'latest' && !streams()[0].lastId,
    `the runs page follows /api/v1/events?after=latest: ${JSON.stringify(streams())}`);
  const fresh = await api('/api/v1/runs', E.TRIGGER, { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ yaml: 'name: fresh\nsteps:\n  - {name: a, type: shell, with: {argv: [/bin/true]}}\n' }) });
  await page.waitForSelector(`tr[data-run="${fresh.id}"]`, { timeout: 30000 });
  await page.waitForSelector(`tr[data-run="${fresh.id}"] [data-state=succeeded]`, { timeout: 60000 });
  // the daemon restarts under the open page: the stream breaks, a run is made and finishes
  // while no daemon serves (the CLI drives it), and the page opens the stream again with the
  // newest id it had as Last-Event-ID, so it misses nothing and shows that run.
  // Meanwhile two more tabs: the page of a run whose step is writing its log (the drain
  // interrupts the run, the next daemon continues it: the tab follows it to its end, and its
  // log is the API's, byte for byte), and the slice map (it says the daemon does not answer
  // and draws itself again once it does).
  const down = errors.length;
  const talker = await submitYaml('name: talker\nsteps:\n  - {name: talk, type: shell, with: {argv: [/bin/sh, -c, ' +
    '\'i=0; while [ $i -lt 30 ]; do i=$((i+1)); echo "line $i"; sleep 0.25; done\']}}\n');
  const tab = async () => { // another tab signed in with the read token (sessionStorage is per tab)
    const t = await ctx.newPage();
    watch(t);
    await t.addInitScript((tok) => sessionStorage.setItem('tpuflow.token', tok), E.READ);
    return t;
  };
  const logTab = await tab();
  // the talker tab's asks for its log (in the run's event stream while the run is live, by
  // itself while it is not): each one after the first from where it was
  const logAsks = [];
  logTab.on('request', (r) => {
    const u = new URL(r.url());
    if (/\/logs$/.test(u.pathname) || u.searchParams.has('log')) logAsks.push(+(u.searchParams.get('offset') || 0));
  });
  await logTab.goto(base + '/#/runs/' + talker.id + '?step=talk');
  await logTab.waitForFunction(() => +document.querySelector('pre.log')?.dataset.lines >= 2, null, { timeout: 60000 });
  await logTab.evaluate(() => { window.sameDocument = true; });
  const mapTab = await tab();
  await mapTab.goto(base + '/#/slices');
  await mapTab.waitForSelector('[data-chip]');
  process.kill(+JSON.parse(readFileSync(E.HOME_DIR + '/daemon.json', 'utf8')).pid, 'SIGTERM');
  await waitFor(async () => !existsSync(E.HOME_DIR + '/daemon.json'), 'the daemon to stop');
  await mapTab.waitForSelector('.trouble[role=alert]', { timeout: 30000 });
  check(await mapTab.$$eval('[data-chip]', (c) => c.length) === 4, 'the slice map keeps its last picture while the daemon is away');
  const gone = JSON.parse(execFileSync(E.BIN, ['run', E.MEANWHILE, '--home', E.HOME_DIR, '--embedded', '--json'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
  check(gone.status === 'succeeded', `the run made while the daemon was down: ${gone.status}`);
  await startDaemon(new URL(base).port);
  await page.waitForSelector(`tr[data-run="${gone.run_id}"] [data-state=succeeded]`, { timeout: 60000 });
  const again = streams().slice(1);
  check(again.length >= 1 && again.every((a) => /^[0-9]+$/.test(a.lastId || '')),
    `the stream was opened again with Last-Event-ID: ${JSON.stringify(again)}`);
  // what the browser says of the stream cut, the requests reset by the stopping daemon and
  // the connections refused while it was down is expected
  expected(down, /ERR_CONNECTION_REFUSED|ERR_CONNECTION_RESET|ERR_INCOMPLETE_CHUNKED_ENCODING/);
  check(await page.evaluate(() => window.sameDocument === true), 'the runs page reloaded');
  page.off('request', onAsk);
  await shot('runs-live.png');
  await mapTab.waitForFunction(() => !document.querySelector('.trouble') && document.querySelectorAll('[data-chip]').length === 4,
    null, { timeout: 30000 });
  await mapTab.close();
  // the talker: interrupted by the drain, continued by the next daemon; its tab followed it
  // again (without a reload) and its log equals the API's, nothing lost or repeated
  await waitFor(async () => (await api('/api/v1/runs/' + talker.id, E.READ)).state === 'succeeded', 'the talker to finish', 120000);
  const talkLog = await api(`/api/v1/runs/${talker.id}/steps/talk/logs`, E.READ);
  await waitFor(async () => await logTab.$eval('pre.log', (e) => e.dataset.ended === 'true' && e.textContent) === talkLog,
    'the talker tab to show the whole log', 60000);
  const shownLog = await logTab.$eval('pre.log', (e) => e.textContent);
  check(shownLog === talkLog && talkLog.includes('line 30'),
    `the log followed through the restart: ${JSON.stringify(shownLog.slice(-200))} vs ${JSON.stringify(talkLog.slice(-200))}`);
  // asked again from the bytes it had (?offset=), not from the start
  const offsets = logAsks.slice(1);
  check(logAsks[0] === 0 && offsets.length >= 1 && offsets.every((o, i) => o > 0 && (!i || o >= offsets[i - 1])) &&
    offsets[offsets.length - 1] <= Buffer.byteLength(talkLog),
  `the talker tab's log asked again with offsets ${JSON.stringify(logAsks)}`);
  await logTab.waitForSelector('h1 [data-state=succeeded]', { timeout: 30000 });
  check(await logTab.evaluate(() => window.sameDocument === true), 'the talker tab reloaded');
  await logTab.screenshot({ path: join(E.SHOTS, 'run-restarted.png'), fullPage: true });
  await logTab.close();

  // A tab hidden for a while lets go of its stream (the browser gives all tabs six
  // connections to the daemon); shown again it opens it where it stopped, the events and the
  // log that comes in them: its log is the API's to the byte, the run ends on it, no reload.
  const gate = join(E.HOME_DIR, '..', 'hidden-gate');
  const quietRun = await submitYaml('name: backstage\nsteps:\n  - {name: s, type: shell, with: {argv: [/bin/sh, -c, ' +
    `'echo before; while [ ! -e ${gate} ]; do sleep 0.1; done; i=0; while [ $i -lt 20 ]; do i=$((i+1)); echo "after $i"; done']}}\n`);
  const hiddenTab = await tab();
  const held = new Set();
  const isStream = (r) => /\/events|\/logs\?follow/.test(r.url());
  hiddenTab.on('request', (r) => { if (isStream(r)) held.add(r); });
  for (const ev of ['requestfinished', 'requestfailed']) hiddenTab.on(ev, (r) => held.delete(r));
  await hiddenTab.goto(base + '/#/runs/' + quietRun.id + '?step=s');
  await hiddenTab.waitForFunction(() => document.querySelector('pre.log')?.textContent.includes('before'), null, { timeout: 60000 });
  await hiddenTab.evaluate(() => { window.sameDocument = true; });
  check(held.size === 1, `a live run's tab holds ${held.size} streams (its events, the log in them)`);
  const visibility = (state) => hiddenTab.evaluate((v) => { // what the browser does on a tab switch
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => v });
    document.dispatchEvent(new Event('visibilitychange'));
  }, state);
  const hadBytes = Buffer.byteLength(await hiddenTab.$eval('pre.log', (e) => e.textContent));
  await visibility('hidden');
  await waitFor(async () => held.size === 0, 'the hidden tab to close its streams', 30000);
  writeFileSync(gate, '');
  await waitFor(async () => (await api('/api/v1/runs/' + quietRun.id, E.READ)).state === 'succeeded', 'the hidden run to finish');
  check(!(await hiddenTab.$eval('pre.log', (e) => e.textContent)).includes('after'), 'the hidden tab went on reading its log');
  const reopened = [], logAgain = [];
  hiddenTab.on('request', (r) => {
    if (isStream(r)) reopened.push(r.headers()['last-event-id'] || '');
    if (new URL(r.url()).searchParams.has('log') || /\/logs\?/.test(r.url())) logAgain.push(r);
  });
  await visibility('visible');
  const quietLog = await api(`/api/v1/runs/${quietRun.id}/steps/s/logs`, E.READ);
  await waitFor(async () => await hiddenTab.$eval('pre.log', (e) => e.dataset.ended === 'true' && e.textContent) === quietLog,
    'the tab shown again to catch up its log', 60000);
  await hiddenTab.waitForSelector('h1 [data-state=succeeded]', { timeout: 60000 });
  check(await hiddenTab.evaluate(() => window.sameDocument === true) && reopened.some((id) => /^[0-9]+$/.test(id)),
    `the tab shown again reopened its streams from where they were (${JSON.stringify(reopened)}), no reload`);
  // the log asked again from the bytes it had (and ended as the API's, above), in the
  // stream opened again: what the log answers from there is the rest of it only
  const again1 = logAgain[0];
  const rest = await api(`/api/v1/runs/${quietRun.id}/steps/s/logs?offset=${hadBytes}`, E.READ);
  check(again1 && new URL(again1.url()).searchParams.get('log') === 's' &&
    +new URL(again1.url()).searchParams.get('offset') === hadBytes && hadBytes > 0 &&
    rest === Buffer.from(quietLog).subarray(hadBytes).toString(),
  `the log shown again: asked ${again1 && again1.url()} with ${hadBytes} bytes shown; from there it is ${JSON.stringify(rest)}`);
  await hiddenTab.close();
  expected(down, /ERR_CONNECTION_REFUSED|ERR_CONNECTION_RESET|ERR_INCOMPLETE_CHUNKED_ENCODING|Failed to fetch|network error/);

  // The event stream read as the standard says (web/ui/sse.js), in the page: the runs list's
  // stream is answered here with CRLF line ends and the event's data over two `data:` lines
  // (and a retry that keeps it from asking again during the check); on that event the list
  // reads the runs again and shows the run made meanwhile, as the API lists it.
  let made, asked;
  const madeRun = new Promise((r) => { made = r; }), streamAsked = new Promise((r) => { asked = r; });
  const crafted = async (route) => {
    asked(); // the page has drawn the list it read
    const id = await madeRun;
    await route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' },
      body: `retry: 600000\r\n\r\n: a comment\r\nevent: run\r\ndata: {"run_id": "${id}",\r\ndata:  "to": "pending"}\r\n\r\n` });
  };
  const eventsUrl = (u) => u.pathname === '/api/v1/events';
  await page.route(eventsUrl, crafted);
  await go('#/runs?limit=20');
  await streamAsked;
  const viaCrlf = await submitYaml('name: crlf\nsteps:\n  - {name: a, type: shell, with: {argv: [/bin/true]}}\n');
  made(viaCrlf.id);
  await page.waitForSelector(`tr[data-run="${viaCrlf.id}"]`, { timeout: 30000 }).catch(() => {});
  const firstRow = await page.$eval('table.runs tbody tr', (tr) => tr.dataset.run);
  check(firstRow === viaCrlf.id && (await api('/api/v1/runs?limit=1', E.READ)).items[0].id === viaCrlf.id,
    `the list after a CRLF event with two data lines starts with ${firstRow}, the API with ${viaCrlf.id}`);
  await page.unroute(eventsUrl, crafted);

  // a failed run with retries: the step's three attempts, its log
  await go('#/runs/' + E.FLAKY);
  const fr = await graphMatches(E.FLAKY, E.READ);
  // the labels, project and priority it was submitted with, as the API has them
  const facts = await page.$eval('dl.facts', (dl) => ({
    labels: [...dl.querySelectorAll('[data-label]')].map((e) => [e.dataset.label, e.textContent]),
    project: dl.querySelector('[data-project]')?.textContent ?? null,
    priority: dl.querySelector('[data-priority]') ? +dl.querySelector('[data-priority]').textContent : null }));
  check(fr.labels.sha === 'abc123' && fr.project === 'vision' && fr.priority === 6 &&
    JSON.stringify(facts.labels.sort()) === JSON.stringify(Object.entries(fr.labels).map(([k, v]) => [k, `${k}=${v}`]).sort()) &&
    facts.project === fr.project && facts.priority === fr.priority,
  `the flaky run's facts ${JSON.stringify(facts)}, the API's ${JSON.stringify([fr.labels, fr.project, fr.priority])}`);
  await page.waitForSelector('pre.log[data-ended]');
  const log = await page.$eval('pre.log', (e) => e.textContent);
  check(log.includes('==> attempt 3 <==') && log.includes('it breaks'), 'the failed step log');
  check(await all('.step-detail table.attempts tbody tr', (r) => r.length) === 3, 'three attempts listed');
  await shot('run-failed.png');

  // 1,000 steps: one collapsed level, then opened
  const t0 = Date.now();
  await go('#/runs/' + E.WIDE);
  await page.waitForSelector('svg.dag .node.group[data-count="998"]');
  const drawn = Date.now() - t0;
  await graphMatches(E.WIDE, E.READ);
  check(await attr('svg.gantt', 'data-rows') === '1000', 'the timeline has 1,000 rows');
  await page.click('svg.dag .node.group');
  await page.waitForFunction(() => document.querySelectorAll('svg.dag .node[data-step]').length === 1000);
  check(await all('svg.dag .node[data-step]', (e) => e.every((n) => n.dataset.state === 'succeeded')), 'all 1,000 succeeded');
  await shot('run-1000.png');
  console.log(`dashboard: 1,000-step graph drawn ${drawn} ms after navigation`);

  // the preempted run: its train step's first attempt ended preempted, and it resumed
  await go('#/runs/' + E.VICTIM + '?step=train');
  const v = await graphMatches(E.VICTIM, E.READ);
  const att = v.steps.find((s) => s.name === 'train').attempts_detail;
  check(att.length >= 2 && att[0].failure_class === 'preempted', `victim attempts ${JSON.stringify(att.map((a) => a.failure_class))}`);
  await page.waitForSelector('.step-detail table.attempts');
  check((await page.$eval('.step-detail table.attempts', (e) => e.textContent)).includes('preempted'), 'preempted attempt shown');

  // a step run on Slurm: each attempt's job id, Slurm state and nodes, as the API has them
  await go('#/runs/' + E.SLURM + '?step=work');
  await page.waitForSelector('.step-detail table.attempts [data-slurm-job]');
  const sl = (await api(`/api/v1/runs/${E.SLURM}/steps`, E.READ)).items[0].attempts_detail;
  const cells = await all('.step-detail table.attempts tbody tr', (trs) => trs.map((tr) => [
    +tr.querySelector('[data-slurm-job]').dataset.slurmJob, tr.querySelector('[data-slurm-state]').textContent,
    tr.querySelector('[data-slurm-nodes]').textContent]));
  check(sl.length === 2 && JSON.stringify(cells) === JSON.stringify(sl.map((a) => [a.slurm_job, a.slurm_state, a.slurm_nodes])),
    `Slurm attempts shown ${JSON.stringify(cells)}, the API ${JSON.stringify(sl)}`);
  check((await page.$eval('.step-detail .slurm', (e) => e.textContent)).includes('Slurm job 4242 COMPLETED on tpu-node[1-2]'),
    'the step names its newest Slurm job');
  await shot('run-slurm.png');

  // the slice map: one pool of four chips, all free now; accounting by project
  await go('#/slices');
  await page.waitForSelector('[data-pool] [data-chip]');
  const chips = await all('[data-chip]', (e) => e.map((c) => c.dataset.state));
  check(chips.length === 4 && chips.every((c) => c === 'free'), `slice map cells ${chips}`);
  const acct = (await api('/api/v1/slices', E.READ)).accounting.projects;
  check(await all('table.accounting tbody tr', (r) => r.length) === acct.length, 'accounting rows');

  // models: the list, a model with two versions compared
  await go('#/models');
  await page.waitForSelector('table.models');
  const models = (await api('/api/v1/models', E.READ)).items.map((m) => m.name).sort();
  const shown = (await all('table.models tbody tr', (r) => r.map((t) => t.dataset.model))).sort();
  check(JSON.stringify(models) === JSON.stringify(shown), `models ${shown} vs ${models}`);
  await go('#/models/victim?a=1&b=2');
  await page.waitForSelector('table.compare, .empty-compare');
  check(!(await page.$('table.health')), 'a read token is shown serving health');
  const cmp = await api('/api/v1/models/victim:compare?a=1&b=2', E.READ);
  const nm = Object.keys(cmp.metrics).length;
  check(nm ? await all('table.compare tbody tr', (r) => r.length) === nm : !!(await page.$('.empty-compare')) && !(await page.$('table.compare')),
    `compare: ${nm} metrics in the API`);
  check(await all('table.versions tbody tr', (r) => r.length) === 2, 'two versions');
  await shot('model.png');

  // ---- trigger: a run from the form, followed to its end without a reload
  await signIn(E.TRIGGER);
  await page.click('.trigger summary');
  // the form offers the registered pipelines only, and asks for a run by name
  await page.waitForSelector('#tr-pipeline option[value=live]', { state: 'attached' });
  const offered = (await all('#tr-pipeline option', (o) => o.map((x) => x.value))).filter(Boolean).sort();
  const registered = (await api('/api/v1/pipelines', E.TRIGGER)).items.filter((p) => p.registered).map((p) => p.name).sort();
  check(JSON.stringify(offered) === JSON.stringify(registered) && !offered.includes('wide'),
    `the form offers ${offered}, the registered pipelines are ${registered}`);
  await page.selectOption('#tr-pipeline', 'live');
  await page.waitForSelector('input[data-param=lines][type=number]');
  check(await page.inputValue('input[data-param=lines]') === '6', 'the param field holds its default');
  await page.fill('input[data-param=lines]', '8');
  const [ask] = await Promise.all([
    page.waitForRequest((r) => r.method() === 'POST' && new URL(r.url()).pathname === '/api/v1/runs'),
    page.click('.trigger-form button[type=submit]')]);
  const sent = ask.postDataJSON();
  check(sent.pipeline === 'live' && !('yaml' in sent) && JSON.stringify(sent.params) === '{"lines":"8"}',
    `the form sent ${JSON.stringify(sent)}`);
  await page.waitForFunction(() => /^#\/runs\/[^/?]+$/.test(location.hash));
  const live = decodeURIComponent((await page.evaluate(() => location.hash)).split('/')[2]);
  await page.waitForSelector('p.live[data-live=on]');
  await page.evaluate(() => { window.sameDocument = true; });
  await page.click('svg.dag .node[data-step=talk]');
  await page.waitForSelector('h1 [data-state=succeeded]', { timeout: 120000 });
  await page.waitForSelector('p.live[data-live=off]');
  check(await page.evaluate(() => window.sameDocument === true), 'the page reloaded while following');
  await page.waitForSelector('pre.log[data-ended]');
  check((await page.$eval('pre.log', (e) => e.textContent)).includes('line 8'), 'the live log has line 8');
  await page.click('svg.dag .node[data-step=train]');
  const lw = await expectedPoints(live, 'train', E.TRIGGER);
  await waitFor(async () => +(await attr('[data-curve=loss]', 'data-points')) === lw.loss, 'the live curves');
  await shot('run-live.png');

  // another, cancelled from its page; while it trains the slice map shows who holds the chips
  await go('#/runs');
  await page.waitForSelector('.trigger details');
  await page.click('.trigger summary');
  await page.selectOption('#tr-pipeline', 'longtrain');
  await page.waitForSelector('input[data-param=steps]');
  // it trains until cancelled, however fast training is
  await page.fill('input[data-param=steps]', '100000000');
  await page.click('.trigger-form button[type=submit]');
  await page.waitForFunction(() => /^#\/runs\/[^/?]+$/.test(location.hash));
  const hold = decodeURIComponent((await page.evaluate(() => location.hash)).split('/')[2]);
  await page.waitForSelector('svg.dag .node[data-step=train][data-state=running]', { timeout: 120000 });
  await waitFor(async () => (await api('/api/v1/slices', E.READ)).running.length === 1, 'the slice held');
  await go('#/slices');
  await page.waitForSelector('[data-chip][data-state=busy]');
  const busy = await all('[data-chip]', (e) => e.map((c) => [c.dataset.state, c.dataset.run]));
  check(busy.every(([s, r]) => s === 'busy' && r === hold), `slice map while training: ${JSON.stringify(busy)}`);
  await shot('slices.png');
  await page.screenshot({ path: join(E.SHOTS, 'readme-slices.png') });
  // its attempt marked as a Slurm job (the columns orchestrator/kinds_slurm.c writes; a
  // fixture here, tests/it_slurm.sh lists a real one with `tpuflow slices`): the page lists it
  execFileSync('python3', ['-c', `import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
with db:
    db.execute("UPDATE attempts SET slurm_job=5150, slurm_nodes='tpu-node3', slurm_state='RUNNING' WHERE run_id=? AND step='train' AND state='running'", (sys.argv[2],))`,
  E.HOME_DIR + '/tpuflow.db', hold]);
  await page.waitForSelector('table.slurm tr[data-slurm-job="5150"]');
  const onSlurm = (await api('/api/v1/slices', E.READ)).slurm;
  check(onSlurm.length === 1 && onSlurm[0].run === hold && (await page.$eval('table.slurm tbody tr', (e) => e.textContent))
    .includes('5150') && (await page.$eval('table.slurm tbody tr', (e) => e.textContent)).includes('RUNNINGtpu-node3'),
  `the steps on Slurm: ${JSON.stringify(onSlurm)}`);
  await shot('slices-slurm.png');
  // an operator marks a chip failed: it is drawn failed, and the training waits with a reason
  await api('/api/v1/slices/v4/chips/1,1,0:fail', E.ADMIN, { method: 'POST' });
  await page.waitForSelector('[data-chip="1,1,0"][data-state=failed]', { timeout: 30000 });
  await page.waitForSelector('table.queue tbody tr', { timeout: 60000 });
  const q = (await api('/api/v1/queue', E.READ)).items;
  check(q.length === 1 && q[0].run === hold && q[0].reason, `queue: ${JSON.stringify(q)}`);
  check((await page.$eval('table.queue', (e) => e.textContent)).includes(q[0].reason), 'the wait reason shown');
  await shot('slices-failed-chip.png');
  await api('/api/v1/slices/v4/chips/1,1,0:repair', E.ADMIN, { method: 'POST' });
  await go('#/runs/' + hold);
  await page.waitForSelector('[data-action=cancel]');
  await page.click('[data-action=cancel]');
  await page.waitForSelector('h1 [data-state=failed]', { timeout: 120000 });
  check(!(await page.$('[data-action=cancel]')) && !!(await page.$('[data-action=retry]')),
    'after the cancel: no Cancel, a Retry');
  // its train step stays pending, and its log is whole: the page does not follow it on
  await page.waitForSelector('pre.log[data-ended]', { timeout: 30000 });
  await shot('run-cancelled.png');
  // Resume from the same page: it follows the run again (its training runs, then is
  // cancelled once more and ends failed), all without a reload
  await page.evaluate(() => { window.sameDocument = true; });
  await page.click('[data-action=resume]');
  await page.waitForSelector('p.live[data-live=on]', { timeout: 60000 });
  await page.waitForSelector('svg.dag .node[data-step=train][data-state=running]', { timeout: 120000 });
  await page.click('[data-action=cancel]');
  await page.waitForSelector('h1 [data-state=failed]', { timeout: 120000 });
  check(await page.evaluate(() => window.sameDocument === true), 'the page reloaded after Resume');
  // an action the API refuses says why, and keeps saying it: the run deleted meanwhile.
  // The page may also read the run again at any moment from the DELETE on (a refresh the
  // cancel's last events asked for); its 404s, and only those of this run, are expected.
  const deleting = errors.length;
  const del = await api('/api/v1/runs/' + hold, E.ADMIN, { method: 'DELETE' });
  check(del.deleted === true || del.run === hold, `run ${hold} deleted: ${JSON.stringify(del)}`);
  await page.click('[data-action=retry]');
  await page.waitForSelector('.action-error');
  check(/^retry: .*(no run|not found|no such)/i.test(await page.$eval('.action-error', (e) => e.textContent)),
    `the refused retry: ${await page.$eval('.action-error', (e) => e.textContent)}`);
  await go('#/runs');
  await page.waitForSelector('table.runs tbody tr');
  // a read begun before the navigation may end, and be logged, after it: the 404s of the
  // deleted run are counted once the checks that follow are done
  await windowsChecks();
  expected(deleting, new RegExp(`status of 404 .*/api/v1/runs/${hold}[:/)]`));
}

// Four windows, each on a live run's page with its step's log growing: a browser gives the
// pages of one host six connections over HTTP/1.1, and a page held two streams (its events
// and the log), so four took eight and the pages' ordinary requests waited for a stream to
// end. Each page now holds one (the log comes in its event stream): the log still grows in
// every window, and a request made in each completes promptly.
async function windowsChecks() {
  const yaml = 'name: chatty\nsteps:\n  - name: talk\n    type: shell\n    with: {argv: [/bin/sh, -c, ' +
    '"i=0; while [ $i -lt 600 ]; do echo line $i; i=$((i+1)); sleep 0.1; done"]}\n';
  const runs = [];
  for (let i = 0; i < 4; i++) runs.push((await submitYaml(yaml)).id);
  await waitFor(async () => (await Promise.all(runs.map((id) => api('/api/v1/runs/' + id, E.READ))))
    .every((r) => r.state === 'running'), 'the four chatty runs to run');
  const wins = [];
  for (const id of runs) {
    const p = await ctx.newPage();
    watch(p);
    await p.addInitScript((t) => sessionStorage.setItem('tpuflow.token', t), E.READ);
    // the long-lived requests the page holds: its streams (events, followed logs)
    const open = new Set();
    const long = (r) => /\/events(\?|$)|follow=true/.test(r.url());
    p.on('request', (r) => { if (long(r)) open.add(r); });
    p.on('requestfinished', (r) => open.delete(r));
    p.on('requestfailed', (r) => open.delete(r));
    await p.goto(`${base}/#/runs/${id}?step=talk`);
    wins.push({ id, p, open });
  }
  for (const w of wins) {
    await w.p.waitForSelector('p.live[data-live=on]');
    await w.p.waitForFunction(() => +(document.querySelector('pre.log') || {}).dataset?.lines > 0, null, { timeout: 60000 });
  }
  // every window shown, one stream each, and its log still growing
  for (const w of wins) {
    check(await w.p.evaluate(() => document.visibilityState) === 'visible', `window of ${w.id} is not shown`);
    check(w.open.size === 1, `the page of ${w.id} holds ${w.open.size} streams: ${[...w.open].map((r) => r.url())}`);
    const before = +(await w.p.$eval('pre.log', (e) => e.dataset.lines));
    await w.p.waitForFunction((n) => +document.querySelector('pre.log').dataset.lines > n, before, { timeout: 20000 })
      .catch(() => check(false, `the log of ${w.id} stopped at ${before} lines`));
  }
  // an ordinary request from each window, with four live pages open: answered promptly, not
  // queued behind the streams
  for (const w of wins) {
    const ms = await w.p.evaluate(async () => {
      const t0 = performance.now();
      const ask = fetch('/api/v1/runs?limit=1', { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('tpuflow.token') } })
        .then((r) => r.json());
      const late = new Promise((r) => setTimeout(() => r('late'), 10000));
      return (await Promise.race([ask, late])) === 'late' ? -1 : performance.now() - t0;
    });
    check(ms >= 0 && ms < 5000, `a request from the window of ${w.id} with four live pages open took ${ms < 0 ? 'over 10 s' : ms + ' ms'}`);
  }
  for (const w of wins) await w.p.close();
  for (const id of runs) await api(`/api/v1/runs/${id}:cancel`, E.TRIGGER, { method: 'POST', headers: { 'Idempotency-Key': 'win-' + id } });
  for (const id of runs) await waitFor(async () => ['failed', 'succeeded'].includes((await api('/api/v1/runs/' + id, E.READ)).state), `run ${id} to end`);
}

// ---- a token that expires under an open page: the page's next read is refused, the sign-in
// comes back with the API's reason, and signing in again draws the same page anew
async function expiryPass() {
  const brief = () => JSON.parse(execFileSync(E.BIN, ['tokens', 'create', '--home', E.HOME_DIR, '--name', 'brief',
    '--scope', 'read', '--expires', '8s', '--json'], { encoding: 'utf8' })).token;
  const expire = async (tok) => {
    await waitFor(async () => (await fetch(base + '/api/v1/whoami', { headers: { Authorization: 'Bearer ' + tok } })).status === 401,
      'the token to expire', 30000);
    return (await api('/api/v1/whoami', tok)).detail;
  };
  const before = errors.length;
  // the runs list: a run made after the expiry makes it read the list again
  let tok = brief();
  await signIn(tok);
  await page.waitForSelector('h1 [data-live=on]');
  let why = await expire(tok);
  const late = await submitYaml('name: late\nsteps:\n  - {name: a, type: shell, with: {argv: [/bin/true]}}\n');
  await page.waitForSelector('form.signin .error', { timeout: 30000 });
  check((await page.$eval('form.signin .error', (e) => e.textContent)) === why, `the runs page's sign-in says ${why}`);
  await page.fill('#token', E.READ);
  await page.press('#token', 'Enter');
  await page.waitForSelector(`tr[data-run="${late.id}"]`);
  // a run page: its run goes on once the token has expired
  const gate = join(E.HOME_DIR, '..', 'expiry-gate');
  const held = await submitYaml(`name: held\nsteps:\n  - {name: wait, type: shell, with: {argv: [/bin/sh, -c, 'while [ ! -e ${gate} ]; do sleep 0.1; done']}}\n` +
    '  - {name: after, type: shell, needs: [wait], with: {argv: [/bin/true]}}\n');
  tok = brief();
  await signIn(tok);
  await go('#/runs/' + held.id);
  await page.waitForSelector('p.live[data-live=on]');
  why = await expire(tok);
  writeFileSync(gate, '');
  await page.waitForSelector('form.signin .error', { timeout: 60000 });
  check((await page.$eval('form.signin .error', (e) => e.textContent)) === why, `the run page's sign-in says ${why}`);
  await page.fill('#token', E.READ);
  await page.press('#token', 'Enter');
  await page.waitForSelector('h1 [data-state=succeeded]', { timeout: 60000 });
  check(await page.$eval('h1 code', (e) => e.textContent) === held.id, 'signed in again, the run page is drawn anew');
  expected(before, /status of 401/);
}

// ---- admin: the serving health of a deployed model, drawn from GET /v1/models/NAME after
// real predictions: 40 through the bare path (split 75/25 by the canary), 3 malformed ones to v2
async function servingPass() {
  const predict = (path, instances, key) => api(path, E.ADMIN, { method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Request-Key': key }, body: JSON.stringify({ instances }) });
  for (let i = 0; i < 40; i++) await predict('/v1/models/victim:predict', [[0.1, 0.9, 0.3, 0.5]], 'user-' + i);
  for (let i = 0; i < 3; i++) await predict('/v1/models/victim/versions/2:predict', [[1, 2]], 'bad-' + i);
  await signIn(E.ADMIN);
  await go('#/models/victim');
  await page.waitForSelector('table.health tbody tr');
  const want = (await api('/v1/models/victim', E.ADMIN)).model_version_status;
  const rows = await all('table.health tbody tr', (trs) => trs.map((tr) => ({ v: +tr.dataset.version,
    requests: +tr.dataset.requests, errors: +tr.dataset.errors, share: +tr.dataset.share,
    text: tr.textContent })));
  const by = Object.fromEntries(rows.map((r) => [r.v, r]));
  check(rows.length === 2 && want.length === 2, `serving rows ${JSON.stringify(rows)}`);
  for (const s of want) {
    const r = by[+s.version] || {};
    check(r.requests === s.tpuflow_stats.requests && r.errors === s.tpuflow_stats.errors &&
      r.text.includes(s.state.toLowerCase()), `serving v${s.version}: ${JSON.stringify(r)} vs ${JSON.stringify(s)}`);
  }
  check(by[1] && by[2] && by[1].share === 75 && by[2].share === 25 && by[1].text.includes('production'),
    `traffic shares ${JSON.stringify(rows)}`);
  check(by[1].requests + by[2].requests === 43 && by[2].errors === 3 && by[2].text.includes('%'),
    `requests ${by[1].requests} + ${by[2].requests}, errors of v2 ${by[2].errors}`);
  check(!(await page.$('pre.json')), 'serving health drawn as raw JSON');
  await shot('model-serving.png');
}

async function nonePass() {
  await go('#/runs');
  await page.waitForSelector('form.signin');
  await page.click('form.signin button.link');
  await page.waitForSelector('.trigger[data-scope]', { state: 'attached' });
  check(await attr('.trigger', 'data-scope') === 'admin', '--no-auth: whoami scope admin');
  check(!!(await page.$('.trigger details')), '--no-auth: the trigger form is offered');
  await runsList(null);
  // an orphaned run (tests/it_dashboard.sh kills the process that drove it): the list says
  // so in words where the API says orphaned, its state filter selects it as the API does, and
  // its page says what it means
  const marked = await all('table.runs tbody tr', (trs) => trs.filter((tr) => tr.querySelector('[data-orphaned]'))
    .map((tr) => [tr.dataset.run, tr.querySelector('[data-state]').textContent]));
  const orphans = (await api('/api/v1/runs?limit=50', null)).items.filter((r) => r.orphaned).map((r) => [r.id, 'orphaned']);
  check(orphans.length === 1 && orphans[0][0] === E.ORPHAN && JSON.stringify(marked) === JSON.stringify(orphans),
    `orphaned runs shown ${JSON.stringify(marked)}, the API's ${JSON.stringify(orphans)}`);
  await page.selectOption('#f-state', 'orphaned');
  await page.click('form.filters button');
  await page.waitForFunction(() => location.hash.includes('state=orphaned'));
  await page.waitForFunction(() => document.querySelector('#f-state')?.value === 'orphaned' &&
    [...document.querySelectorAll('table.runs tbody tr')].every((tr) => tr.querySelector('[data-orphaned]')));
  const picked = await all('table.runs tbody tr', (trs) => trs.map((tr) => tr.dataset.run));
  const byApi = (await api('/api/v1/runs?state=orphaned', null)).items.map((r) => r.id);
  check(JSON.stringify(picked) === JSON.stringify(byApi), `state=orphaned shows ${picked}, the API ${byApi}`);
  await go('#/runs/' + E.ORPHAN);
  await page.waitForSelector('h1 [data-orphaned]');
  check((await page.$eval('h1 [data-orphaned]', (e) => e.textContent)) === 'orphaned' &&
    (await page.$eval('.orphaned-note', (e) => e.textContent)).includes(`tpuflow runs resume ${E.ORPHAN}`),
  'the orphaned run\'s page says so');
  await shot('run-orphaned.png');
  await go('#/runs/' + E.FLAKY);
  await page.waitForSelector('[data-action=retry]');
  await graphMatches(E.FLAKY, null);
  await go('#/slices');
  await page.waitForSelector('[data-chip]');
  await shot('runs-noauth.png');
}

try {
  if (mode === 'none') await nonePass();
  else { await sseChecks(); await authPass(); await expiryPass(); await servingPass(); }
} catch (e) {
  failures.push(String(e));
  console.error('FAIL ' + e);
  await shot('failure.png').catch(() => {});
}
check(pages > 0, 'no page was checked for its CSP');
check(errors.length === 0, 'console errors: ' + errors.join(' | '));
await ctx.close();
rmSync(profile, { recursive: true, force: true });
console.log(failures.length ? `dashboard (${mode}): ${failures.length} failure(s)` : `dashboard (${mode}): ok`);
process.exit(failures.length ? 1 : 0);
