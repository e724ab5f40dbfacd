// timeline.js — the Gantt of a run's attempts: one row per step that has run, one bar per
// attempt (coloured by how it ended, retries side by side), on one time axis.
import { h, s, duration, when } from './dom.js';

export function timeline(run) {
  const rows = run.steps.filter((st) => st.attempts_detail && st.attempts_detail.length)
    .map((st) => ({ name: st.name, list: st.attempts_detail }))
    .sort((a, b) => a.list[0].started_at - b.list[0].started_at);
  if (!rows.length) return h('p', { class: 'muted' }, 'No attempt has started yet.');
  const now = Date.now() / 1000;
  const t0 = Math.min(...rows.map((r) => r.list[0].started_at));
  const t1 = Math.max(t0 + 0.001, ...rows.flatMap((r) => r.list.map((a) => a.finished_at || now)));
  const big = rows.length > 60;
  const rh = big ? Math.max(2, Math.min(8, 600 / rows.length)) : 20;
  const lw = big ? 0 : 150, width = 900, span = width - lw - 10;
  const x = (t) => lw + ((t - t0) / (t1 - t0)) * span;
  const bars = [];
  rows.forEach((r, i) => {
    if (!big) bars.push(s('text', { x: 0, y: i * rh + 14, class: 'small' },
      r.name.length > 22 ? r.name.slice(0, 21) + '…' : r.name));
    for (const a of r.list) {
      const xa = x(a.started_at), xb = x(a.finished_at || now);
      bars.push(s('rect', { x: xa, y: i * rh + 2, width: Math.max(1, xb - xa), height: Math.max(1, rh - 4),
        class: 'fill-' + a.state, 'data-step': r.name, 'data-attempt': a.n, 'data-state': a.state },
      s('title', {}, `${r.name} attempt ${a.n}: ${a.state}` +
        (a.failure_class ? ` (${a.failure_class})` : '') +
        `, ${when(a.started_at)}, ${duration(a.started_at, a.finished_at)}`)));
    }
  });
  const hgt = rows.length * rh + 24;
  // ticks at quarters of the span, with as many decimals as the span needs to tell them apart
  const total = t1 - t0, dec = Math.min(6, Math.max(0, Math.ceil(-Math.log10(total / 8))));
  const tick = (f) => '+' + (total < 60 ? (f * total).toFixed(dec) + ' s' : duration(t0, t0 + f * total));
  const axis = [0, 0.25, 0.5, 0.75, 1].map((f) => s('text', { x: lw + f * span, y: hgt - 6,
    class: 'small tick', 'text-anchor': f === 0 ? 'start' : f === 1 ? 'end' : 'middle' }, tick(f)));
  return s('svg', { class: 'gantt', viewBox: `0 0 ${width} ${hgt}`, width: '100%',
    'data-rows': rows.length, role: 'img', 'aria-label': `timeline of ${rows.length} steps` },
  bars, axis);
}
