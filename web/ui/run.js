// run.js — one run's page (#/runs/ID?step=NAME): facts and actions, the DAG, the timeline
// of attempts, the steps, and the chosen step's inputs, outputs, metrics, logs, curves and
// checkpoints. While the run is not final the page follows its event stream and redraws in
// place (the DAG keeps its pan and zoom); the same stream carries the chosen step's log, so
// the page holds one connection to the daemon, not two.
import { get, post, follow, whoami, mayTrigger, ApiError } from './api.js';
import { h, at, duration, badge, runBadge, num, bytes } from './dom.js';
import { dagView } from './dag.js';
import { timeline } from './timeline.js';
import { curves } from './curves.js';
import { logView } from './logs.js';

const FINAL = new Set(['succeeded', 'failed', 'interrupted']);
const TABLE_MAX = 200; // step rows drawn at once (a filter narrows the rest)

function kv(obj) {
  const keys = Object.keys(obj || {});
  if (!keys.length) return h('span', { class: 'muted' }, '—');
  return h('dl', { class: 'metrics' }, keys.flatMap((k) => [h('dt', {}, k),
    h('dd', {}, typeof obj[k] === 'number' ? num(obj[k])
      : typeof obj[k] === 'string' ? obj[k] : JSON.stringify(obj[k]))]));
}

// Every param with the value the run used (param_values, as `tpuflow runs show` lists
// them), each said given or default; the values given alone when the run's pipeline no
// longer loads (the API then has no param_values).
function params(run) {
  const pv = run.param_values;
  if (!pv) return Object.keys(run.params || {}).length ? [h('dt', {}, 'Params'), h('dd', {}, kv(run.params))] : null;
  if (!pv.length) return null;
  return [h('dt', {}, 'Params'), h('dd', {}, h('dl', { class: 'metrics params' }, pv.flatMap((p) => [
    h('dt', {}, p.name),
    h('dd', { 'data-param-value': p.name, 'data-source': p.source },
      p.text === null || p.text === undefined ? h('span', { class: 'muted' }, 'unset') : p.text,
      h('span', { class: 'muted' }, p.source === 'param' ? ' (given)' : ' (default)'))])))];
}

// An attempt run as a Slurm job (executor: slurm) also shows its job id, Slurm's state of it
// as last seen and the nodes it ran on; the columns appear when a step has such an attempt.
function attemptsTable(list) {
  if (!list || !list.length) return h('p', { class: 'muted' }, 'No attempt yet.');
  const slurm = list.some((a) => a.slurm_job);
  const dash = (v) => (v === null || v === undefined || v === '' ? '—' : String(v));
  return h('table', { class: 'attempts' },
    h('thead', {}, h('tr', {}, ['#', 'State', 'Failure', 'Exit', 'Started', 'Duration',
      ...(slurm ? ['Slurm job', 'Slurm state', 'Nodes'] : []), 'Error']
      .map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, list.map((a) => h('tr', { 'data-attempt': a.n },
      h('td', { class: 'num' }, String(a.n)), h('td', {}, badge(a.state)),
      h('td', {}, a.failure_class || '—'),
      h('td', { class: 'num' }, dash(a.exit_code)),
      h('td', {}, at(a.started_at)), h('td', { class: 'num' }, duration(a.started_at, a.finished_at)),
      slurm ? [h('td', { class: 'num', 'data-slurm-job': a.slurm_job || null }, dash(a.slurm_job)),
        h('td', { 'data-slurm-state': a.slurm_state || null }, dash(a.slurm_state)),
        h('td', { 'data-slurm-nodes': a.slurm_nodes || null }, a.slurm_nodes || (a.slurm_job ? 'pending' : '—'))] : null,
      h('td', { class: 'error' }, a.error || '')))));
}

// The newest attempt's Slurm job as one phrase: " · Slurm job 42 RUNNING on node1".
function slurmJob(list) {
  const a = [...(list || [])].reverse().find((x) => x.slurm_job);
  if (!a) return null;
  return h('span', { class: 'slurm', 'data-slurm-job': a.slurm_job },
    ` · Slurm job ${a.slurm_job}${a.slurm_state ? ' ' + a.slurm_state : ''}${a.slurm_nodes ? ' on ' + a.slurm_nodes : ''}`);
}

export function runPage(main, id, query, problem) {
  const ctl = new AbortController();
  const path = '/api/v1/runs/' + encodeURIComponent(id);
  let run = null, graph = null, who = null, dag = null, selected = null, panel = null;
  let stepFilter = '', actionError = null;
  let stream = null; // the AbortController of the live event stream while one is open
  const head = h('div'), facts = h('div'), dagBox = h('section', { class: 'dag-section' });
  const gantt = h('section'), steps = h('section'), detail = h('section', { class: 'step-detail' });

  function actions() {
    if (!mayTrigger(who)) return null;
    const act = async (verb) => {
      actionError = null;
      try {
        const r = await post(`${path}:${verb}`);
        if (verb === 'retry' && r.id) location.hash = '#/runs/' + encodeURIComponent(r.id);
        else refresh();
      } catch (e) {
        // kept until the next action: the page redraws on every event
        actionError = `${verb}: ${e.message}`;
        drawHead();
      }
    };
    const final = FINAL.has(run.state);
    return h('span', { class: 'actions' },
      !final && !run.cancel_requested_at ? h('button', { type: 'button', 'data-action': 'cancel', onclick: () => act('cancel') }, 'Cancel') : null,
      final && run.state !== 'succeeded' ? h('button', { type: 'button', 'data-action': 'resume', onclick: () => act('resume') }, 'Resume') : null,
      final && run.state !== 'succeeded' ? h('button', { type: 'button', 'data-action': 'retry', onclick: () => act('retry') }, 'Retry') : null);
  }

  function drawHead() {
    const live = !FINAL.has(run.state);
    head.replaceChildren(
      h('p', {}, h('a', { href: '#/runs' }, '« Runs')),
      h('h1', {}, 'Run ', h('code', {}, run.id), ' ', runBadge(run), ' ', actions()),
      h('p', { class: 'live muted', 'aria-live': 'polite', 'data-live': live ? 'on' : 'off' },
        live ? '● live' : 'final'),
      ...(run.orphaned ? [h('p', { class: 'orphaned-note', 'data-orphaned': 'true' },
        'Orphaned: the run is running, but the process that drove it is gone. The daemon takes it ' +
        'up when it has room for another run, or `tpuflow runs resume ' + run.id + '` continues it.')] : []),
      ...(actionError ? [h('p', { class: 'error action-error', role: 'alert' }, actionError)] : []),
      ...(trouble ? [h('p', { class: 'error trouble', role: 'alert' }, trouble)] : []));
    // done as the API and the runs list count it (succeeded or cached); the failed and
    // skipped ones are named beside it, not counted as done
    const count = (...states) => run.steps.filter((st) => states.includes(st.state)).length;
    const done = count('succeeded', 'cached'), failed = count('failed'), skipped = count('skipped');
    document.title = `Run ${run.id} (${run.state}) · tpuflow`;
    facts.replaceChildren(h('dl', { class: 'facts' },
      h('dt', {}, 'Pipeline'), h('dd', {}, run.pipeline),
      h('dt', {}, 'Trigger'), h('dd', {}, run.trigger || '—'),
      h('dt', {}, 'Created'), h('dd', {}, at(run.created_at)),
      h('dt', {}, 'Duration'), h('dd', {}, duration(run.started_at, run.finished_at)),
      h('dt', {}, 'Steps done'), h('dd', { 'data-done': done, 'data-failed': failed, 'data-skipped': skipped },
        `${done} of ${run.steps.length}` + (failed ? `, ${failed} failed` : '') + (skipped ? `, ${skipped} skipped` : '')),
      params(run),
      run.priority !== null && run.priority !== undefined
        ? [h('dt', {}, 'Priority'), h('dd', { 'data-priority': run.priority }, String(run.priority))] : null,
      run.project ? [h('dt', {}, 'Project'), h('dd', { 'data-project': run.project }, run.project)] : null,
      Object.keys(run.labels || {}).length ? [h('dt', {}, 'Labels'), h('dd', { class: 'labels' },
        Object.entries(run.labels).map(([k, v]) => h('span', { class: 'label', 'data-label': k }, `${k}=${v}`)))] : null,
      run.model ? [h('dt', {}, 'Model'), h('dd', {}, h('a', { href: '#/models/' + encodeURIComponent(run.model.name) },
        `${run.model.name} v${run.model.version}`))] : null,
      run.error ? [h('dt', {}, 'Error'), h('dd', { class: 'error' }, run.error)] : null));
  }

  function drawSteps() {
    const list = run.steps.filter((st) => !stepFilter || st.state === stepFilter || st.name.includes(stepFilter));
    const filter = h('input', { type: 'search', value: stepFilter, placeholder: 'state or name',
      'aria-label': 'filter steps', onchange: (e) => { stepFilter = e.target.value.trim(); drawSteps(); } });
    steps.replaceChildren(h('h2', {}, 'Steps'), h('div', { class: 'tools' }, filter,
      list.length > TABLE_MAX ? h('span', { class: 'muted' }, `first ${TABLE_MAX} of ${list.length}`) : null),
    h('table', { class: 'steps' },
      h('thead', {}, h('tr', {}, ['Step', 'Type', 'State', 'Attempts', 'Duration', 'Metrics']
        .map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, list.slice(0, TABLE_MAX).map((st) => h('tr', { 'data-step': st.name,
        class: st.name === selected ? 'selected' : null },
      h('th', { scope: 'row' }, h('a', { href: stepLink(st.name) }, st.name)),
      h('td', {}, st.type),
      h('td', {}, badge(st.state), st.reason ? h('span', { class: 'muted' }, ' ' + st.reason) : null),
      h('td', { class: 'num' }, String(st.attempts)),
      h('td', { class: 'num' }, duration(st.started_at, st.finished_at)),
      h('td', {}, kv(st.metrics)))))));
  }

  const stepLink = (name) => `#/runs/${encodeURIComponent(id)}?step=${encodeURIComponent(name)}`;

  // The chosen step: its facts redraw on every update; logs and curves live on.
  function drawDetail() {
    const st = run.steps.find((x) => x.name === selected);
    if (!st) { detail.replaceChildren(); return; }
    if (!panel || panel.name !== st.name) {
      if (panel) panel.logs.stop();
      const c = st.type === 'train' ? curves() : null;
      panel = { name: st.name, curves: c, logs: logView(id, st.name, c), facts: h('div'),
        ckpt: h('div', { class: 'checkpoints' }), ckptState: null };
      detail.replaceChildren(h('h2', {}, 'Step ', h('code', {}, st.name)), panel.facts,
        ...(c ? [h('h3', {}, 'Training curves'), c.el] : []),
        ...(st.type === 'train' ? [h('h3', {}, 'Checkpoints'), panel.ckpt] : []),
        h('h3', {}, 'Logs'), panel.logs.el);
      if (stream) stream.abort(); // opened again for this step's log
    }
    // a log no stream carries (the run is final): the rest of it in one request
    if (!stream && FINAL.has(run.state)) panel.logs.read();
    panel.facts.replaceChildren(
      h('p', {}, st.type, ' · ', badge(st.state), st.reason ? ' ' + st.reason : '',
        st.slice ? ` · slice ${st.slice}` : '', st.slice_seconds ? ` · ${num(st.slice_seconds)} slice-s` : '',
        slurmJob(st.attempts_detail)),
      attemptsTable(st.attempts_detail),
      h('div', { class: 'cols' },
        h('div', {}, h('h3', {}, 'With'), st.with ? h('pre', { class: 'json' }, JSON.stringify(st.with, null, 2)) : h('span', { class: 'muted' }, '—')),
        h('div', {}, h('h3', {}, 'Outputs'), kv(st.outputs)),
        h('div', { class: 'step-metrics' }, h('h3', {}, 'Metrics'), kv(st.metrics))));
    if (st.type === 'train' && panel.ckptState !== st.state + st.attempts) {
      panel.ckptState = st.state + st.attempts;
      get(`${path}/steps/${encodeURIComponent(st.name)}/checkpoints`).then((c) => {
        panel.ckpt.replaceChildren(c.items.length ? h('table', { 'data-count': c.items.length },
          h('thead', {}, h('tr', {}, ['Step', 'Saved', 'Tensors', 'Size'].map((x) => h('th', { scope: 'col' }, x)))),
          h('tbody', {}, c.items.map((k) => h('tr', { 'data-ckpt': k.step },
            h('td', { class: 'num' }, String(k.step)), h('td', {}, at(k.created_at)),
            h('td', { class: 'num' }, String(k.tensors)), h('td', { class: 'num' }, bytes(k.bytes))))))
          : h('p', { class: 'muted', 'data-count': 0 }, 'No checkpoint yet.'),
        h('p', { class: 'muted' }, 'under ', h('code', {}, c.prefix)));
      }).catch((e) => panel.ckpt.replaceChildren(h('p', { class: 'error' }, e.message)));
    }
  }

  function pickDefault() {
    const q = new URLSearchParams(query).get('step');
    if (q && run.steps.some((st) => st.name === q)) return q;
    return (run.steps.find((st) => st.state === 'failed') || run.steps.find((st) => st.type === 'train') ||
      run.steps.find((st) => st.state === 'running') || run.steps[0] || {}).name;
  }

  function draw() {
    drawHead();
    if (dag) dag.update(run);
    gantt.replaceChildren(h('h2', {}, 'Timeline'), timeline(run));
    drawSteps();
    drawDetail();
    if (ready) followRun(); // a run resumed from this page (or elsewhere) is followed again
  }

  let pending = null, lastLoad = 0, trouble = null, ready = false;
  const load = async () => {
    const wait = 400 - (Date.now() - lastLoad); // a burst of events makes one reload
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    if (ctl.signal.aborted) return run; // the page was left meanwhile: nothing to read
    lastLoad = Date.now();
    const r = await get(path);
    if (!ctl.signal.aborted) { run = r; trouble = null; draw(); }
    return r;
  };
  // One load at a time; a refresh asked while one is under way (its answer may predate what
  // was asked for) makes one more load after it, so the newest change is always read.
  let again = false;
  const refresh = () => {
    if (pending) { again = true; return pending; }
    pending = (async () => {
      try {
        do { again = false; await load(); } while (again && !ctl.signal.aborted);
      } catch (e) {
        // a refused token brings the sign-in back; anything else is said on the page (the
        // next event reads the run again)
        if (ctl.signal.aborted) return;
        if (e instanceof ApiError && e.status === 401) { ctl.abort(); problem(e); return; }
        trouble = 'Could not read the run again: ' + e.message;
        drawHead();
      } finally { pending = null; }
    })();
    return pending;
  };

  (async () => {
    try {
      [run, who] = await Promise.all([get(path), whoami().catch(() => null)]);
      selected = pickDefault();
      main.replaceChildren(head, facts, dagBox, gantt, steps, detail);
      draw();
      try {
        graph = await get(path + '/graph');
        dag = dagView(graph, run, (name) => { location.hash = stepLink(name); });
        dagBox.replaceChildren(h('h2', {}, 'Graph'), dag.el);
      } catch (e) {
        dagBox.replaceChildren(h('p', { class: 'error' }, 'graph: ' + e.message));
      }
      ready = true;
      followRun();
    } catch (e) {
      if (!ctl.signal.aborted) problem(e);
    }
  })();

  // Follows the run while it can change: a live run through its own event stream, from now
  // on (what changed between the page's read and the stream's start is read again once it
  // is open), until the stream's `end`, with the chosen step's log in it (?log=STEP&offset=
  // the bytes shown: `log` events, then `log-end` once the log is whole; the rest of a final
  // run's log comes before its `end`); a step chosen meanwhile opens it again for that log.
  // An interrupted run (a drained daemon's, which the next daemon continues, or one resumed
  // elsewhere) is followed through the events of all runs, until one of its own arrives.
  // Then the run is read again and followed as it now is.
  let following = false;
  const eventsPath = () => path + '/events?after=latest' + (panel
    ? `&log=${encodeURIComponent(panel.name)}&offset=${panel.logs.have()}` : '');
  const onEvent = (name, ev) => {
    if (name !== 'log' && name !== 'log-end') return refresh();
    if (!panel || !ev || ev.step !== panel.name) return;
    if (name === 'log') panel.logs.feed(ev.offset, ev.bytes);
    else panel.logs.end();
  };
  async function followRun() {
    if (following || ctl.signal.aborted) return;
    following = true;
    try {
      while (!ctl.signal.aborted && (!FINAL.has(run.state) || run.state === 'interrupted')) {
        if (!FINAL.has(run.state)) {
          const one = stream = new AbortController();
          const stop = () => one.abort();
          ctl.signal.addEventListener('abort', stop);
          try {
            await follow(eventsPath, onEvent, one.signal, () => refresh());
          } catch (e) {
            if (!one.signal.aborted || ctl.signal.aborted) throw e; // else: another step's log
          } finally {
            stream = null;
            ctl.signal.removeEventListener('abort', stop);
          }
        } else {
          const back = new AbortController();
          const stop = () => back.abort();
          ctl.signal.addEventListener('abort', stop);
          await follow('/api/v1/events?after=latest', (name, ev) => {
            if (ev && ev.run_id === run.id) back.abort();
          }, back.signal, () => refresh()).catch((e) => { if (!back.signal.aborted) throw e; });
          ctl.signal.removeEventListener('abort', stop);
        }
        if (ctl.signal.aborted) break;
        const state = run.state;
        await refresh();
        if (run.state === state && FINAL.has(state)) await new Promise((r) => setTimeout(r, 1000));
      }
    } catch (e) {
      if (!ctl.signal.aborted) problem(e);
    }
    following = false;
  }
  return {
    stop() { ctl.abort(); if (panel) panel.logs.stop(); },
    query(q) { // only ?step= changed: choose another step without reloading the page
      query = q;
      if (!run) return;
      selected = pickDefault();
      drawSteps();
      drawDetail();
      detail.scrollIntoView({ block: 'start' });
    },
  };
}
