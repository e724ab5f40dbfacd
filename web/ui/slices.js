// slices.js — the slice pool (#/slices): each pool's torus as a picture, one plane of chips
// per z, every chip coloured by the run holding it (failed chips crossed out, chips held for
// a waiting job hatched); the steps running as Slurm jobs (job id, Slurm state, nodes); the
// queue with each waiting attempt's priority, project, wait, preemptions and reason;
// slice-seconds by project. Redrawn every few seconds.
import { get, ApiError } from './api.js';
import { h, s, duration, num } from './dom.js';

const GAP = 3;
const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#76b7b2', '#edc948', '#ff9da7',
  '#9c755f', '#af7aa1', '#86bcb6'];

function poolMap(pool, byJob, colour) {
  const [X, Y, Z] = pool.dims;
  const CELL = Math.max(14, Math.min(44, Math.floor(560 / (X * Z)))); // small pools drawn big
  const planes = [];
  const counts = { free: 0, busy: 0, failed: 0, reserved: 0 };
  for (let z = 0; z < Z; z++) {
    const cells = [];
    for (let y = 0; y < Y; y++)
      for (let x = 0; x < X; x++) {
        const v = pool.occupancy[x + X * (y + Y * z)];
        const job = v > 0 ? byJob.get(v) : null;
        const state = v > 0 ? 'busy' : v === -1 ? 'failed' : v === -2 ? 'reserved' : 'free';
        counts[state]++;
        const cx = x * (CELL + GAP), cy = y * (CELL + GAP);
        cells.push(s('g', { class: 'chip chip-' + state, 'data-chip': `${x},${y},${z}`,
          'data-state': state, 'data-run': job ? job.run : null },
        s('rect', { x: cx, y: cy, width: CELL, height: CELL, rx: 3,
          fill: job ? colour(job.run) : null }),
        state === 'failed' ? s('path', { d: `M${cx + 5} ${cy + 5}L${cx + CELL - 5} ${cy + CELL - 5}M${cx + CELL - 5} ${cy + 5}L${cx + 5} ${cy + CELL - 5}`, class: 'cross' }) : null,
        s('title', {}, `chip ${x},${y},${z}: ` + (job ? `${job.run} / ${job.step} (attempt ${job.attempt})` : state))));
      }
    const w = X * (CELL + GAP), hh = Y * (CELL + GAP);
    planes.push(h('figure', { class: 'plane' }, s('svg', { width: w, height: hh, viewBox: `0 0 ${w} ${hh}`,
      role: 'img', 'aria-label': `${pool.name} plane z=${z}` }, cells), h('figcaption', { class: 'muted' }, `z = ${z}`)));
  }
  return h('section', { class: 'pool', 'data-pool': pool.name },
    h('h2', {}, `Pool ${pool.name} `, h('code', {}, pool.spec)),
    h('p', { class: 'muted' }, `${pool.chips} chips: ${pool.busy} busy, ${pool.free} free, ${pool.failed} failed` +
      (counts.reserved ? `, ${counts.reserved} held for a waiting job` : '') +
      ` · utilisation ${num(pool.utilization * 100)} %` + (pool.largest_free ? ` · largest free box ${pool.largest_free}` : '')),
    h('div', { class: 'planes' }, planes));
}

export function slicesPage(main, problem) {
  let timer = null, stopped = false, drawnAt = null;
  const colours = new Map();
  const colour = (run) => {
    if (!colours.has(run)) colours.set(run, PALETTE[colours.size % PALETTE.length]);
    return colours.get(run);
  };
  async function load() {
    let v;
    try {
      v = await get('/api/v1/slices');
    } catch (e) {
      if (stopped) return;
      // refused (401, 403) or never drawn: the problem in place of the page; a daemon that
      // does not answer for a moment (restarting) is said above the last picture, and asked
      // again
      if ((e instanceof ApiError && e.status < 500) || !drawnAt) { problem(e); return; }
      let note = main.querySelector('.trouble');
      if (!note) main.prepend(note = h('p', { class: 'error trouble', role: 'alert' }));
      note.textContent = `Could not read the slices: ${e.message}. Trying again every 3 s; ` +
        `the picture below is from ${drawnAt.toLocaleTimeString()}.`;
      timer = setTimeout(load, 3000);
      return;
    }
    if (stopped) return;
    drawnAt = new Date();
    const byJob = new Map(v.running.map((r) => [r.job, r]));
    const now = Date.now() / 1000;
    main.replaceChildren(
      h('h1', {}, 'Slices'),
      ...(v.pools || []).map((p) => poolMap(p, byJob, colour)),
      h('h2', {}, 'Running'),
      v.running.length ? h('table', { class: 'slices-running' },
        h('thead', {}, h('tr', {}, ['', 'Run', 'Step', 'Attempt', 'Slice', 'Box', 'Project', 'Running', 'Preemptions']
          .map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, v.running.map((r) => h('tr', { 'data-run': r.run },
          h('td', {}, h('span', { class: 'swatch', 'data-colour': colour(r.run) })),
          h('td', {}, h('a', { href: '#/runs/' + encodeURIComponent(r.run) }, r.run)),
          h('td', {}, r.step), h('td', { class: 'num' }, String(r.attempt)), h('td', {}, r.slice),
          h('td', {}, `${r.box.origin.join(',')} +${r.box.shape.join('x')}`), h('td', {}, r.project),
          h('td', { class: 'num' }, duration(r.started_at, now)),
          h('td', { class: 'num' }, String(r.preemptions || 0))))))
        : h('p', { class: 'muted' }, 'No attempt holds a slice now.'),
      // steps running as Slurm jobs (executor: slurm): their chips are Slurm's GRES, not ours
      ...((v.slurm || []).length ? [h('h2', {}, 'On Slurm'), h('table', { class: 'slurm' },
        h('thead', {}, h('tr', {}, ['Run', 'Step', 'Attempt', 'Slurm job', 'Slurm state', 'Nodes']
          .map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, v.slurm.map((j) => h('tr', { 'data-run': j.run, 'data-slurm-job': j.slurm_job },
          h('td', {}, h('a', { href: `#/runs/${encodeURIComponent(j.run)}?step=${encodeURIComponent(j.step)}` }, j.run)),
          h('td', {}, j.step), h('td', { class: 'num' }, String(j.attempt)),
          h('td', { class: 'num' }, String(j.slurm_job)), h('td', {}, j.state || '—'),
          h('td', {}, j.nodes || 'pending')))))] : []),
      h('h2', {}, 'Queue'),
      v.waiting.length ? h('table', { class: 'queue' },
        h('thead', {}, h('tr', {}, ['Run', 'Step', 'Attempt', 'Slice', 'Chips', 'Priority', 'Project', 'Waiting', 'Preemptions', 'Reason']
          .map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, v.waiting.map((w) => h('tr', { 'data-run': w.run },
          h('td', {}, h('a', { href: '#/runs/' + encodeURIComponent(w.run) }, w.run)),
          h('td', {}, w.step), h('td', { class: 'num' }, String(w.attempt)), h('td', {}, w.slice),
          h('td', { class: 'num' }, String(w.chips)), h('td', { class: 'num' }, String(w.priority ?? '—')),
          h('td', {}, w.project || '—'), h('td', { class: 'num' }, duration(now - w.waiting_seconds, now)),
          h('td', { class: 'num' }, String(w.preemptions || 0)), h('td', {}, w.reason)))))
        : h('p', { class: 'muted empty-queue' }, 'Nothing waits for a slice.'),
      h('h2', {}, 'Accounting by project'),
      h('table', { class: 'accounting' },
        h('thead', {}, h('tr', {}, ['Project', 'Attempts', 'Slice-seconds', 'Chip-seconds'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, v.accounting.projects.map((p) => h('tr', { 'data-project': p.project },
          h('td', {}, p.project), h('td', { class: 'num' }, String(p.attempts)),
          h('td', { class: 'num' }, num(p.slice_seconds)), h('td', { class: 'num' }, num(p.chip_seconds)))))));
    // the swatches and chips take their colour from the CSSOM (no inline style attribute)
    for (const sw of main.querySelectorAll('.swatch')) sw.style.background = sw.dataset.colour;
    timer = setTimeout(load, 3000);
  }
  load();
  return { stop() { stopped = true; clearTimeout(timer); } };
}
