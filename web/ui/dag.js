// dag.js — a run's DAG as a graph: steps in columns by plan level (the API's `levels`),
// ordered in each column near the steps they need, edges as curves. A level with more than
// COLLAPSE steps is drawn as one node (its state counts) until clicked open, so a 1,000-step
// fan-out stays readable and fast. Pan by dragging, zoom with the wheel or the buttons.
import { h, s } from './dom.js';

const COLLAPSE = 24;
const W = 168, H = 34, COL = 220, ROW = 44;

function stateCounts(names, byName) {
  const c = {};
  for (const n of names) {
    const st = byName.get(n)?.state || 'pending';
    c[st] = (c[st] || 0) + 1;
  }
  return c;
}

// Node positions: {key -> {x, y, names}} where key is a step name or 'level:N'.
function layout(graph, open) {
  const pos = new Map(), of = new Map();
  const needs = new Map(graph.steps.map((st) => [st.name, st.needs]));
  graph.levels.forEach((names, l) => {
    const collapsed = names.length > COLLAPSE && !open.has(l);
    if (collapsed) {
      const key = 'level:' + l;
      pos.set(key, { x: l * COL, y: 0, level: l, names });
      for (const n of names) of.set(n, key);
      return;
    }
    // barycentre of what each step needs, so edges cross less
    const bary = (n) => {
      const ys = (needs.get(n) || []).map((m) => pos.get(of.get(m))?.y).filter((y) => y !== undefined);
      return ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : 0;
    };
    const order = names.map((n, i) => [n, bary(n), i]).sort((a, b) => a[1] - b[1] || a[2] - b[2]);
    const top = order.length ? Math.max(0, order[0][1] - ((order.length - 1) * ROW) / 2) : 0;
    order.forEach(([n], i) => {
      pos.set(n, { x: l * COL, y: top + i * ROW, level: l });
      of.set(n, n);
    });
  });
  return { pos, of };
}

// Draws graph (from GET /runs/{id}/graph) with the states of run; returns {el, update(run)}.
export function dagView(graph, run, onSelect) {
  const open = new Set();
  const defs = new Map(graph.steps.map((d) => [d.name, d]));
  let byName = new Map(run.steps.map((st) => [st.name, st]));
  let view = { x: 20, y: 20, k: 1 };
  const g = s('g');
  const svg = s('svg', { class: 'dag', role: 'img', 'aria-label': `DAG of ${graph.steps.length} steps` }, g);
  const apply = () => g.setAttribute('transform', `translate(${view.x} ${view.y}) scale(${view.k})`);
  let bounds = { w: 1, h: 1, y0: 0 };

  function node(key, p) {
    if (p.names) { // a collapsed level
      const c = stateCounts(p.names, byName);
      let x = 0;
      const bars = Object.entries(c).map(([st, n]) => {
        const w = (W * n) / p.names.length;
        const r = s('rect', { x: x, y: H - 6, width: w, height: 6, class: 'fill-' + st });
        x += w;
        return r;
      });
      return s('g', { class: 'node group', transform: `translate(${p.x} ${p.y})`, tabindex: 0,
        role: 'button', 'data-level': p.level, 'data-count': p.names.length,
        onclick: () => { open.add(p.level); draw(); },
        onkeydown: (e) => { if (e.key === 'Enter') { open.add(p.level); draw(); } } },
      s('rect', { width: W, height: H, rx: 5, class: 'box' }),
      s('text', { x: 8, y: 15 }, `level ${p.level}: ${p.names.length} steps`),
      s('text', { x: 8, y: 26, class: 'small' },
        Object.entries(c).map(([st, n]) => `${n} ${st}`).join(', ').slice(0, 34)),
      bars, s('title', {}, 'Open this level'));
    }
    const st = byName.get(key) || { state: 'pending', attempts: 0 };
    const def = defs.get(key) || {};
    const skipped = st.state === 'skipped';
    const label = key.length > 20 ? key.slice(0, 19) + '…' : key;
    return s('g', { class: `node state-${st.state}${skipped ? ' skipped' : ''}`,
      transform: `translate(${p.x} ${p.y})`, tabindex: 0, role: 'button',
      'data-step': key, 'data-state': st.state, 'data-attempts': st.attempts,
      onclick: () => onSelect(key), onkeydown: (e) => { if (e.key === 'Enter') onSelect(key); } },
    s('rect', { width: W, height: H, rx: 5, class: 'box fill-' + st.state }),
    s('text', { x: 8, y: 15 }, label),
    s('text', { x: 8, y: 27, class: 'small' }, // the state in words too, not in colour only
      `${def.type} · ${st.state}` + (st.attempts > 1 ? ` · ×${st.attempts}` : '')),
    st.attempts > 1 ? s('text', { x: W - 6, y: 14, class: 'retries', 'text-anchor': 'end',
      'data-retries': st.attempts - 1 }, `↻${st.attempts - 1}`) : null,
    s('title', {}, `${key} (${def.type}): ${st.state}` +
      (st.attempts ? `, ${st.attempts} attempt(s)` : '') + (st.reason ? ` — ${st.reason}` : '') +
      (def.when ? `\nwhen: ${def.when}` : '')));
  }

  function draw() {
    const { pos, of } = layout(graph, open);
    const edges = new Set();
    for (const st of graph.steps)
      for (const n of st.needs) edges.add(of.get(n) + '\u0000' + of.get(st.name));
    const paths = [];
    for (const e of edges) {
      const [a, b] = e.split('\u0000');
      const pa = pos.get(a), pb = pos.get(b);
      if (!pa || !pb || a === b) continue;
      const x1 = pa.x + W, y1 = pa.y + H / 2, x2 = pb.x, y2 = pb.y + H / 2, mx = (x1 + x2) / 2;
      paths.push(s('path', { class: 'edge', d: `M${x1} ${y1}C${mx} ${y1} ${mx} ${y2} ${x2} ${y2}` }));
    }
    const nodes = [...pos].map(([k, p]) => node(k, p));
    g.replaceChildren(...paths, ...nodes);
    let y0 = Infinity, y1 = -Infinity, x1 = 0;
    for (const p of pos.values()) { y0 = Math.min(y0, p.y); y1 = Math.max(y1, p.y + H); x1 = Math.max(x1, p.x + W); }
    bounds = { w: x1, h: y1 - y0, y0 };
    svg.setAttribute('height', Math.round(Math.min(420, Math.max(120, bounds.h + 60))));
  }

  function fit() {
    const r = svg.getBoundingClientRect();
    const k = Math.min(1.5, (r.width - 40) / bounds.w, (r.height - 40) / bounds.h);
    view = { k: Math.max(k, 0.02), x: 20, y: 20 - bounds.y0 * Math.max(k, 0.02) };
    apply();
  }
  const zoom = (f, cx, cy) => {
    const k = Math.min(4, Math.max(0.02, view.k * f));
    view = { k, x: cx - ((cx - view.x) * k) / view.k, y: cy - ((cy - view.y) * k) / view.k };
    apply();
  };
  svg.addEventListener('wheel', (e) => {
    e.preventDefault();
    const r = svg.getBoundingClientRect();
    zoom(e.deltaY < 0 ? 1.2 : 1 / 1.2, e.clientX - r.left, e.clientY - r.top);
  }, { passive: false });
  let drag = null;
  svg.addEventListener('pointerdown', (e) => {
    if (e.target.closest('.node')) return;
    drag = { x: e.clientX - view.x, y: e.clientY - view.y };
    svg.setPointerCapture(e.pointerId);
  });
  svg.addEventListener('pointermove', (e) => {
    if (drag) { view.x = e.clientX - drag.x; view.y = e.clientY - drag.y; apply(); }
  });
  svg.addEventListener('pointerup', () => { drag = null; });

  const mid = () => { const r = svg.getBoundingClientRect(); return [r.width / 2, r.height / 2]; };
  const tools = h('div', { class: 'tools' },
    h('button', { type: 'button', onclick: () => zoom(1.25, ...mid()), 'aria-label': 'zoom in' }, '+'),
    h('button', { type: 'button', onclick: () => zoom(0.8, ...mid()), 'aria-label': 'zoom out' }, '−'),
    h('button', { type: 'button', onclick: fit }, 'Fit'),
    graph.levels.some((l) => l.length > COLLAPSE)
      ? h('button', { type: 'button', onclick: () => {
        if (open.size) open.clear(); else graph.levels.forEach((_, l) => open.add(l));
        draw(); fit();
      } }, 'Open/close big levels') : null,
    h('span', { class: 'muted' }, `${graph.steps.length} steps, ${graph.levels.length} levels`));
  const el = h('div', { class: 'dagbox' }, tools, svg);
  draw();
  apply();
  requestAnimationFrame(fit);
  return {
    el,
    update(r) { byName = new Map(r.steps.map((st) => [st.name, st])); draw(); },
  };
}
