// views.js — sign-in, problems, and the runs list (filters, text search, order and cursor in
// the URL hash, so every view is a link).
import { get, post, follow, token, whoami, mayTrigger, ApiError } from './api.js';
import { h, at, duration, runBadge } from './dom.js';

// the run states, and `orphaned` (running, its process gone), which the API also selects on
const STATES = ['', 'pending', 'running', 'orphaned', 'succeeded', 'failed', 'interrupted'];
const TRIGGERS = ['', 'cli', 'api', 'schedule'];
// The columns the list is sorted by (GET /api/v1/runs?sort=, docs/api.md): a header's first
// click sorts the way named first, the next the other way. -created is the API's default,
// left out of the URL.
const SORTS = {
  State: ['state', '-state'], Pipeline: ['pipeline', '-pipeline'],
  Created: ['-created', 'created'], Duration: ['-duration', 'duration'],
};
const SORT_SAYS = {
  state: 'by state, A to Z', '-state': 'by state, Z to A',
  pipeline: 'by pipeline, A to Z', '-pipeline': 'by pipeline, Z to A',
  '-created': 'newest first', created: 'oldest first',
  '-duration': 'longest first (runs not ended yet last)', duration: 'shortest first (runs not ended yet last)',
};
const FILTERS = ['state', 'pipeline', 'trigger', 'q'];

export function signIn(main, why, done) {
  const input = h('input', { id: 'token', type: 'password', autocomplete: 'off', required: true,
    placeholder: 'tpf_…', 'aria-describedby': 'token-help' });
  const form = h('form', { class: 'card signin', onsubmit: (e) => {
    e.preventDefault();
    token.set(input.value.trim());
    done();
  } },
  h('h1', {}, 'Sign in'),
  why ? h('p', { class: 'error', role: 'alert' }, why) : null,
  h('label', { for: 'token' }, 'API token'), input,
  h('p', { id: 'token-help', class: 'muted' },
    'Make one with `tpuflow tokens create --scope read`. It stays in this tab only.'),
  h('button', { type: 'submit' }, 'Sign in'),
  h('button', { type: 'button', class: 'link', onclick: () => { token.set(''); done(); } },
    'Continue without a token (a daemon started with --auth none)'));
  main.replaceChildren(form);
  document.title = 'Sign in · tpuflow';
  input.focus();
}

export function problem(main, e, retry) {
  if (e instanceof ApiError && e.status === 401) return signIn(main, e.message, retry);
  const text = e instanceof ApiError && e.status === 403
    ? 'This token lacks the scope for this page: ' + e.message
    : 'Could not load: ' + e.message;
  main.replaceChildren(h('p', { class: 'error', role: 'alert' }, text));
}

export async function runsPage(main, query, rerender, life) {
  const q = new URLSearchParams(query);
  const api = new URLSearchParams();
  for (const k of [...FILTERS, 'sort', 'cursor']) if (q.get(k)) api.set(k, q.get(k));
  api.set('limit', q.get('limit') || '50');
  let page;
  const who = whoami().catch(() => null);
  try {
    page = await get('/api/v1/runs?' + api);
  } catch (e) {
    return life.ctl.signal.aborted ? undefined : problem(main, e, rerender);
  }
  // stopped while loading (signed out, another page): draw nothing over what replaced it,
  // and ask nothing more (after a sign-out a request would go without a token)
  if (life.ctl.signal.aborted) return;
  const trigger = h('div', { class: 'trigger' });
  const link = (over) => {
    const p = new URLSearchParams(q);
    for (const [k, v] of Object.entries(over)) if (v) p.set(k, v); else p.delete(k);
    return '#/runs' + (p.toString() ? '?' + p : '');
  };
  const state = h('select', { id: 'f-state', name: 'state' },
    STATES.map((s) => h('option', { value: s, selected: s === (q.get('state') || '') }, s || 'any')));
  const pipeline = h('input', { id: 'f-pipeline', name: 'pipeline', value: q.get('pipeline') || '',
    placeholder: 'pipeline name' });
  const trig = h('select', { id: 'f-trigger', name: 'trigger' },
    TRIGGERS.map((s) => h('option', { value: s, selected: s === (q.get('trigger') || '') }, s || 'any')));
  const text = h('input', { id: 'f-q', name: 'q', type: 'search', value: q.get('q') || '',
    placeholder: 'id, pipeline or error text' });
  const filters = h('form', { class: 'filters', role: 'search', onsubmit: (e) => {
    e.preventDefault();
    location.hash = link({ state: state.value, pipeline: pipeline.value.trim(),
      trigger: trig.value, q: text.value.trim(), cursor: '' });
  } },
  h('label', { for: 'f-q' }, 'Search'), text,
  h('label', { for: 'f-state' }, 'State'), state,
  h('label', { for: 'f-pipeline' }, 'Pipeline'), pipeline,
  h('label', { for: 'f-trigger' }, 'Trigger'), trig,
  h('button', { type: 'submit' }, 'Filter'));
  const row = (r) => h('tr', { 'data-run': r.id },
    h('td', {}, h('a', { href: '#/runs/' + encodeURIComponent(r.id) }, r.id)),
    h('td', {}, runBadge(r)),
    h('td', {}, r.pipeline),
    h('td', { 'data-trigger': r.trigger || '' }, r.trigger || '—'),
    h('td', {}, at(r.created_at)),
    h('td', { class: 'num' }, duration(r.started_at, r.finished_at)),
    h('td', { class: 'num' }, `${r.done}/${r.steps}`));
  const rows = page.items.map(row);
  const cursor = page.next ? new URL(page.next, location.origin).searchParams.get('cursor') : null;
  const liveMark = h('span', { class: 'live muted', 'aria-live': 'polite', 'data-live': 'off' });
  // how many runs the filters select, on every page (the API's total); where the API
  // stopped counting (total_exact false) there are more: "1,000+ runs"
  const count = h('p', { class: 'muted count' });
  const counted = (p) => {
    const more = p.total_exact === false, many = more || p.total !== 1;
    count.dataset.total = p.total;
    count.dataset.exact = String(!more);
    count.textContent = `${p.total.toLocaleString()}${more ? '+' : ''} run${many ? 's' : ''}` +
      (FILTERS.some((k) => api.has(k))
        ? (many ? ' match' : ' matches') + ' these filters' : '') +
      (p.items.length < p.total || more ? `, ${p.items.length} on this page` : '');
  };
  counted(page);
  const trouble = h('p', { class: 'error trouble', role: 'alert' });
  // a sortable column's header is a link to the list in its next order (from the first page)
  const sort = q.get('sort') || '-created';
  const header = (c) => {
    const ways = SORTS[c];
    if (!ways) return h('th', { scope: 'col' }, c);
    const on = ways.includes(sort), next = sort === ways[0] ? ways[1] : ways[0];
    return h('th', { scope: 'col', 'data-sort': on ? sort : null,
      'aria-sort': on ? (sort[0] === '-' ? 'descending' : 'ascending') : null },
    h('a', { href: link({ sort: next === '-created' ? '' : next, cursor: '' }), class: 'sort',
      title: 'Sort ' + SORT_SAYS[next] }, c, on ? h('span', { 'aria-hidden': 'true' }, sort[0] === '-' ? ' ▼' : ' ▲') : null));
  };
  main.replaceChildren(
    h('h1', {}, 'Runs ', liveMark), trouble, trigger, filters, rows.length ? count : null,
    rows.length
      ? h('table', { class: 'runs' },
        h('caption', { class: 'muted' }, 'Sorted ' + (SORT_SAYS[sort] || sort)),
        h('thead', {}, h('tr', {}, ['Run', 'State', 'Pipeline', 'Trigger', 'Created', 'Duration',
          'Steps done'].map(header))),
        h('tbody', { id: 'runs-body' }, rows))
      : FILTERS.some((k) => api.has(k)) || api.has('cursor') // filters that match nothing, or no run at all
        ? h('p', { class: 'muted empty' }, 'No run matches these filters. ', h('a', { href: '#/runs' }, 'All runs'))
        : h('p', { class: 'muted empty' }, 'No runs yet: `tpuflow run FILE` against this daemon, ' +
          'POST /api/v1/runs, or New run (a token of scope trigger) starts one.'),
    h('nav', { class: 'pager', 'aria-label': 'pages' },
      q.get('cursor') ? h('a', { href: link({ cursor: '' }) }, '« First page') : null,
      cursor ? h('a', { href: link({ cursor }), rel: 'next' }, 'Next page »') : null));
  // The first page keeps itself current from the event stream, started from now (no
  // history): a run's state change (a new run is one) or a step's end makes it ask for the
  // page again, at most every 500 ms; nothing is asked while nothing happens. Later pages
  // stay as they were, so a cursor stays valid.
  if (!q.get('cursor')) {
    let last = JSON.stringify(page.items), timer = null, busy = false;
    const shown = () => new Set([...document.querySelectorAll('#runs-body tr')].map((tr) => tr.dataset.run));
    const reload = async () => {
      timer = null;
      if (life.ctl.signal.aborted) return;
      if (busy) { timer = setTimeout(reload, 500); return; }
      busy = true;
      try {
        const p = await get('/api/v1/runs?' + api);
        const j = JSON.stringify(p.items);
        if (!life.ctl.signal.aborted) counted(p);
        const body = document.getElementById('runs-body');
        if (j !== last && !life.ctl.signal.aborted) {
          last = j;
          if (body) body.replaceChildren(...p.items.map(row));
          else rerender(); // the first run of an empty list: draw the table
        }
        trouble.textContent = '';
      } catch (e) {
        if (e instanceof ApiError && e.status === 401 && !life.ctl.signal.aborted) { // signed out by the API
          life.ctl.abort();
          return problem(main, e, rerender);
        }
        trouble.textContent = 'Could not read the runs again: ' + e.message + ' (the next change asks again)';
      }
      busy = false;
    };
    const touches = (name, ev) => ev && (name === 'run' ||
      (name === 'step' && shown().has(ev.run_id) && ev.to !== 'running'));
    liveMark.dataset.live = 'on';
    liveMark.textContent = '● live';
    follow('/api/v1/events?after=latest', (name, ev) => {
      if (touches(name, ev) && !timer) timer = setTimeout(reload, 500);
    }, life.ctl.signal).catch((e) => {
      if (life.ctl.signal.aborted) return;
      if (e instanceof ApiError && e.status === 401) { life.ctl.abort(); return problem(main, e, rerender); }
      liveMark.dataset.live = 'off'; // said, not hidden: the list no longer keeps itself current
      liveMark.textContent = '○ not live: ' + e.message;
    });
  }
  const w = await who;
  if (life.ctl.signal.aborted) return;
  if (mayTrigger(w)) trigger.replaceChildren(triggerForm());
  trigger.dataset.scope = w ? w.scope : 'unknown';
}

// "New run": a registered pipeline (`tpuflow pipelines add`, POST /api/v1/pipelines), a field
// for each param it declares (typed, prefilled with its default, required without one), and
// a submit that asks for a run of that pipeline BY NAME with the values changed from their
// defaults (POST /api/v1/runs {pipeline, params}: the server runs the registered text), then
// opens the run.
const FIELD = { int: { type: 'number', step: '1' }, float: { type: 'number', step: 'any' } };
function paramField(q) {
  const def = q.default === undefined || q.default === null ? null
    : typeof q.default === 'object' ? JSON.stringify(q.default) : String(q.default);
  const id = 'param-' + q.name;
  const input = q.type === 'bool'
    ? h('input', { id, type: 'checkbox', 'data-param': q.name, 'data-default': def, checked: def === 'true' })
    : h('input', { id, ...(FIELD[q.type] || { type: 'text' }), 'data-param': q.name,
      'data-default': def, value: def === null ? '' : def, required: def === null,
      placeholder: q.type === 'list' ? '[a, b]' : null });
  return h('div', { class: 'param' },
    h('label', { for: id }, q.name, h('span', { class: 'muted' }, ` ${q.type}${def === null ? ', required' : ''}`)),
    input, q.description ? h('span', { class: 'muted' }, q.description) : null);
}

function triggerForm() {
  const pick = h('select', { id: 'tr-pipeline', name: 'pipeline', required: true },
    h('option', { value: '' }, 'choose a registered pipeline'));
  const fields = h('div', { class: 'params' });
  const msg = h('p', { class: 'error', role: 'alert' });
  get('/api/v1/pipelines').then((l) => {
    const reg = l.items.filter((p) => p.registered);
    pick.append(...reg.map((p) => h('option', { value: p.name }, p.name)));
    if (!reg.length) msg.textContent = 'No pipeline is registered: `tpuflow pipelines add FILE` registers one.';
  }).catch((e) => { msg.textContent = e.message; });
  pick.addEventListener('change', async () => {
    fields.replaceChildren();
    msg.textContent = '';
    if (!pick.value) return;
    try {
      const p = await get('/api/v1/pipelines/' + encodeURIComponent(pick.value));
      fields.replaceChildren(...p.params.map(paramField));
    } catch (e) { msg.textContent = e.message; }
  });
  const form = h('form', { class: 'card trigger-form', onsubmit: async (e) => {
    e.preventDefault();
    if (!pick.value) return;
    const params = {};
    for (const i of fields.querySelectorAll('input[data-param]')) {
      const v = i.type === 'checkbox' ? String(i.checked) : i.value.trim();
      if (v !== '' && v !== i.dataset.default) params[i.dataset.param] = v;
    }
    try {
      const r = await post('/api/v1/runs', { pipeline: pick.value, params });
      location.hash = '#/runs/' + encodeURIComponent(r.id);
    } catch (err) { msg.textContent = err.message; }
  } },
  h('label', { for: 'tr-pipeline' }, 'Pipeline'), pick, fields,
  h('button', { type: 'submit' }, 'Start run'), msg);
  return h('details', {}, h('summary', {}, 'New run'), form);
}
