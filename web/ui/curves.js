// curves.js — a train step's curves drawn as its progress lines arrive (the JSON lines of
// its log: `step` events every few steps, `epoch` events with the evaluation): loss,
// accuracy, AUC, examples/s, input wait and device utilisation, with uPlot.
import uPlot from 'uplot';
import { h } from './dom.js';

// chart -> series: [label, event kind ('step', 'epoch' or '*' for both), field]
const CHARTS = [
  ['loss', 'Loss', [['train', 'step', 'loss'], ['train (epoch)', 'epoch', 'train_loss'], ['eval', 'epoch', 'loss']]],
  ['accuracy', 'Accuracy', [['train', 'step', 'accuracy'], ['train (epoch)', 'epoch', 'train_accuracy'], ['eval', 'epoch', 'accuracy']]],
  ['auc', 'AUC (eval)', [['eval', 'epoch', 'auc']]],
  ['examples_per_second', 'Examples/s', [['examples/s', '*', 'examples_per_second']]],
  ['input_wait', 'Input wait (share of wall time)', [['input wait', 'epoch', 'input_wait']]],
  ['utilization', 'Device utilisation', [['MXU', 'epoch', 'utilization']]],
];
const COLOURS = ['#0a58ca', '#9a6700', '#1a7f37'];

// A tick label with the decimals its axis step needs (uPlot's default keeps three, so an AUC
// axis from 0.9990 to 0.9999 read 1, 1, 1, 1); steps below 10^-4 in exponent form.
function tickLabel(v, incr) {
  if (v === 0) return '0';
  let d = Math.max(0, -Math.floor(Math.log10(incr) + 1e-9));
  if (Math.abs(Math.round(incr * 10 ** d) - incr * 10 ** d) > 1e-6) d++; // 0.25, 0.025...
  if (d <= 4) return v.toLocaleString(undefined, { minimumFractionDigits: d, maximumFractionDigits: d });
  return v.toExponential(Math.min(6, Math.max(1, Math.ceil(Math.log10(Math.abs(v) / incr)) - 1)));
}

// Returns {el, add(line) -> true when it was a progress line, has()}.
export function curves() {
  const points = CHARTS.map(([, , series]) => series.map(() => new Map())); // step -> value
  const el = h('div', { class: 'curves', hidden: true });
  const plots = [];
  let dirty = false, any = false;

  function build() {
    for (const [i, [key, title, series]] of CHARTS.entries()) {
      const box = h('figure', { class: 'curve', 'data-curve': key, 'data-points': 0 },
        h('figcaption', {}, title));
      el.append(box);
      plots[i] = { box, plot: new uPlot({
        width: 420, height: 200, legend: { show: true }, cursor: { drag: { x: true, y: false } },
        scales: { x: { time: false } },
        axes: [{ label: 'step', stroke: 'currentColor' }, { stroke: 'currentColor', size: 64,
          values: (u, splits, ax, space, incr) => {
            const labels = splits.map((v) => tickLabel(v, incr));
            box.dataset.yTicks = labels.join(' '); // what the axis reads, for tests
            return labels;
          } }],
        series: [{ label: 'step' }, ...series.map(([label], j) => ({ label, stroke: COLOURS[j],
          width: 1.5, spanGaps: true, points: { show: series[j][1] !== 'step' } }))],
      }, [[], ...series.map(() => [])], box) };
    }
  }

  function redraw() {
    dirty = false;
    for (const [i, maps] of points.entries()) {
      const xs = [...new Set(maps.flatMap((m) => [...m.keys()]))].sort((a, b) => a - b);
      const data = [xs, ...maps.map((m) => xs.map((x) => (m.has(x) ? m.get(x) : null)))];
      plots[i].plot.setData(data);
      const n = maps.reduce((t, m) => t + m.size, 0);
      plots[i].box.dataset.points = n;
      plots[i].box.hidden = n === 0;
    }
  }

  return {
    el,
    has: () => any,
    add(line) {
      if (line[0] !== '{') return false;
      let ev;
      try { ev = JSON.parse(line); } catch { return false; }
      if (!ev || (ev.event !== 'step' && ev.event !== 'epoch') || typeof ev.step !== 'number') return false;
      if (!any) { any = true; el.hidden = false; build(); }
      for (const [i, [, , series]] of CHARTS.entries())
        series.forEach(([, kind, field], j) => {
          if ((kind === '*' || kind === ev.event) && typeof ev[field] === 'number')
            points[i][j].set(ev.step, ev[field]);
        });
      if (!dirty) { dirty = true; requestAnimationFrame(redraw); }
      return true;
    },
  };
}
