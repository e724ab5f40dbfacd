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
        axes: [{ label: 'step', stroke: 'currentColor' }, { stroke: 'currentColor', size: 56 }],
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
