// dom.js — small helpers: element building (text only, never HTML strings), times in the
// viewer's zone, durations.
export function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

// In the viewer's zone and locale, the zone named ("5:40:19 AM UTC", "11:10:19 AM GMT+5:30"):
// run ids and logs carry UTC times, so a time without its zone was ambiguous beside them.
const fmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'long' });
export const when = (t) => (t ? fmt.format(new Date(t * 1000)) : '—');
export const iso = (t) => (t ? new Date(t * 1000).toISOString() : null);
// A <time> element: the time as when() says it, the instant in UTC on hover.
export const at = (t) => (t ? h('time', { datetime: iso(t), title: iso(t) }, when(t)) : '—');

export function duration(start, end) {
  if (!start) return '—';
  let s = Math.max(0, (end || Date.now() / 1000) - start);
  if (s < 60) return s.toFixed(1) + ' s';
  const parts = [];
  for (const [n, u] of [[86400, 'd'], [3600, 'h'], [60, 'm']]) {
    if (s >= n) { parts.push(Math.floor(s / n) + u); s %= n; }
  }
  parts.push(Math.floor(s) + 's');
  return parts.slice(0, 2).join(' ');
}

export const badge = (state) => h('span', { class: 'state state-' + state, 'data-state': state }, state);

// A run's state as the runs list and its page say it: a running run whose process is gone
// (`orphaned` in the API) reads "orphaned", as `tpuflow runs list` prints it, its state kept
// in data-state.
export const runBadge = (r) => (r.orphaned
  ? h('span', { class: 'state state-orphaned', 'data-state': r.state, 'data-orphaned': 'true',
    title: 'running, but the process that drove it is gone: the daemon takes it up when it has room, ' +
      'or `tpuflow runs resume` continues it' }, 'orphaned')
  : badge(r.state));

// SVG elements, built like h().
const SVGNS = 'http://www.w3.org/2000/svg';
export function s(tag, attrs = {}, ...kids) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

// A number for people: at most 4 significant digits, thousands grouped.
export const num = (v) => (typeof v === 'number' && Number.isFinite(v)
  ? Number(v.toPrecision(4)).toLocaleString() : String(v));

export const bytes = (n) => (n >= 1 << 20 ? (n / (1 << 20)).toFixed(1) + ' MiB'
  : n >= 1024 ? (n / 1024).toFixed(1) + ' KiB' : n + ' B');
