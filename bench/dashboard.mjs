// bench/dashboard.mjs — the dashboard's speed in Debian's Chromium (playwright-core), driven
// by bench/dashboard.sh:
//   node bench/dashboard.mjs URL_BIG URL_SMALL RUN_1000 RUN_SMALL
// URL_BIG serves a home with 10,000 runs, URL_SMALL one with a few (the peer); both daemons
// run with --no-auth. Prints, median of REPEAT fresh page loads each:
//  - the runs page: first contentful paint, and when the runs table is drawn;
//  - a run page: when the graph is drawn, and when it is interactive (the graph drawn and
//    the main thread free of long tasks (> 50 ms) since), for the 1,000-step run and a small one.
import { chromium } from 'playwright-core';

const [big, small, run1000, runSmall] = process.argv.slice(2);
const REPEAT = +(process.env.TF_BENCH_DASH_REPEAT || 5);
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] });

// Recorded in the page from its first script: paints, long tasks, and when a selector appears.
const probe = (sel) => {
  sessionStorage.setItem('tpuflow.token', '');
  window.__long = [];
  new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.startTime + e.duration); })
    .observe({ type: 'longtask', buffered: true });
  new MutationObserver((_, obs) => {
    if (document.querySelector(sel)) { window.__seen = performance.now(); obs.disconnect(); }
  }).observe(document, { childList: true, subtree: true });
};

async function measure(url, sel) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await ctx.addInitScript(probe, sel);
  const page = await ctx.newPage();
  await page.goto(url);
  await page.waitForFunction(() => window.__seen !== undefined, null, { timeout: 60000 });
  await page.waitForTimeout(1500); // long tasks after the drawing show up here
  const r = await page.evaluate(() => ({
    fcp: performance.getEntriesByName('first-contentful-paint')[0]?.startTime,
    seen: window.__seen,
    quiet: Math.max(window.__seen, ...window.__long),
  }));
  await ctx.close();
  return r;
}

const median = (xs) => { const v = [...xs].sort((a, b) => a - b); return v[Math.floor(v.length / 2)]; };
async function series(url, sel) {
  const rs = [];
  for (let i = 0; i < REPEAT; i++) rs.push(await measure(url, sel));
  return { fcp: median(rs.map((r) => r.fcp)), seen: median(rs.map((r) => r.seen)), quiet: median(rs.map((r) => r.quiet)) };
}
const ms = (x) => `${Math.round(x)} ms`;

const rb = await series(big + '/#/runs', 'table.runs tbody tr');
const rs = await series(small + '/#/runs', 'table.runs tbody tr');
console.log(`runs page, 10,000 runs: first contentful paint ${ms(rb.fcp)}, table drawn ${ms(rb.seen)} (goal FCP <= 1000 ms)`);
console.log(`runs page, a few runs:  first contentful paint ${ms(rs.fcp)}, table drawn ${ms(rs.seen)} (peer)`);
const db = await series(big + '/#/runs/' + run1000, 'svg.dag .node');
const ds = await series(big + '/#/runs/' + runSmall, 'svg.dag .node');
console.log(`run page, 1,000-step DAG: graph drawn ${ms(db.seen)}, interactive ${ms(db.quiet)} (goal <= 2000 ms)`);
console.log(`run page, 5-step DAG:     graph drawn ${ms(ds.seen)}, interactive ${ms(ds.quiet)} (peer)`);
// the runs page's event stream on the big home: the URL the page asks, read for 3 s as the
// page reads it, beside the same stream from the start
const asked = [];
{
  const ctx = await browser.newContext();
  await ctx.addInitScript(probe, 'table.runs tbody tr');
  const page = await ctx.newPage();
  page.on('request', (r) => { if (new URL(r.url()).pathname === '/api/v1/events') asked.push(r.url()); });
  await page.goto(big + '/#/runs');
  await page.waitForFunction(() => window.__seen !== undefined, null, { timeout: 60000 });
  await page.waitForTimeout(500);
  await ctx.close();
}
async function read3s(url) {
  const ctl = new AbortController();
  const t = setTimeout(() => ctl.abort(), 3000);
  let bytes = 0, events = 0;
  try {
    const res = await fetch(url, { signal: ctl.signal });
    for await (const chunk of res.body) {
      bytes += chunk.length;
      events += Buffer.from(chunk).toString().split('\ndata: ').length - 1;
    }
  } catch { /* cut at 3 s */ }
  clearTimeout(t);
  return { bytes, events };
}
if (asked.length !== 1) console.log(`runs page: asked for ${asked.length} event streams (want 1)`);
const now = await read3s(asked[0]);
const all = await read3s(big + '/api/v1/events');
console.log(`runs page event stream (${new URL(asked[0]).search}), first 3 s: ${now.events} events, ${now.bytes} B;` +
  ` from the start: ${all.events} events, ${(all.bytes / 1048576).toFixed(1)} MiB (peer)`);
// the 998-step level opened: every node drawn
const opened = [];
for (let i = 0; i < REPEAT; i++) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await ctx.addInitScript(probe, 'svg.dag .node.group');
  const page = await ctx.newPage();
  await page.goto(big + '/#/runs/' + run1000);
  await page.waitForSelector('svg.dag .node.group');
  const t = await page.evaluate(() => new Promise((done) => {
    const t0 = performance.now();
    document.querySelector('svg.dag .node.group').dispatchEvent(new MouseEvent('click', { bubbles: true }));
    requestAnimationFrame(() => setTimeout(() => done(document.querySelectorAll('svg.dag .node[data-step]').length === 1000
      ? performance.now() - t0 : NaN)));
  }));
  opened.push(t);
  await ctx.close();
}
console.log(`run page, 1,000-step DAG: the 998-step level opened (all 1,000 nodes drawn) in ${ms(median(opened))}`);
await browser.close();
