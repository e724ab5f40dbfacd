// views.js — the pages: sign-in, the runs list (filters and cursor in the URL hash, so every
// view is a link) and one run (steps, attempts, metrics), which follows the run's events live.
import { get, follow, token, ApiError } from './api.js';
import { h, when, iso, duration, badge } from './dom.js';

const STATES = ['', 'pending', 'running', 'succeeded', 'failed', 'interrupted'];

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
  input.focus();
}

function problem(main, e, retry) {
  if (e instanceof ApiError && e.status === 401) return signIn(main, e.message, retry);
  const text = e instanceof ApiError && e.status === 403
    ? 'This token lacks the scope for this page: ' + e.message
    : 'Could not load: ' + e.message;
  main.replaceChildren(h('p', { class: 'error', role: 'alert' }, text));
}

export async function runsPage(main, query, rerender) {
  const q = new URLSearchParams(query);
  const api = new URLSearchParams();
  for (const k of ['state', 'pipeline', 'cursor']) if (q.get(k)) api.set(k, q.get(k));
  api.set('limit', q.get('limit') || '50');
  let page;
  try {
    page = await get('/api/v1/runs?' + api);
  } catch (e) {
    return problem(main, e, rerender);
  }
  const link = (over) => {
    const p = new URLSearchParams(q);
    for (const [k, v] of Object.entries(over)) if (v) p.set(k, v); else p.delete(k);
    return '#/runs' + (p.toString() ? '?' + p : '');
  };
  const state = h('select', { id: 'f-state', name: 'state' },
    STATES.map((s) => h('option', { value: s, selected: s === (q.get('state') || '') }, s || 'any')));
  const pipeline = h('input', { id: 'f-pipeline', name: 'pipeline', value: q.get('pipeline') || '',
    placeholder: 'pipeline name' });
  const filters = h('form', { class: 'filters', role: 'search', onsubmit: (e) => {
    e.preventDefault();
    location.hash = link({ state: state.value, pipeline: pipeline.value.trim(), cursor: '' });
  } },
  h('label', { for: 'f-state' }, 'State'), state,
  h('label', { for: 'f-pipeline' }, 'Pipeline'), pipeline,
  h('button', { type: 'submit' }, 'Filter'));
  const rows = page.items.map((r) => h('tr', { 'data-run': r.id },
    h('td', {}, h('a', { href: '#/runs/' + encodeURIComponent(r.id) }, r.id)),
    h('td', {}, badge(r.state)),
    h('td', {}, r.pipeline),
    h('td', {}, r.retry_of ? 'retry of ' + r.retry_of : '—'),
    h('td', {}, h('time', { datetime: iso(r.started_at || r.created_at) },
      when(r.started_at || r.created_at))),
    h('td', { class: 'num' }, duration(r.started_at, r.finished_at)),
    h('td', { class: 'num' }, `${r.done}/${r.steps}`)));
  const cursor = page.next ? new URL(page.next, location.origin).searchParams.get('cursor') : null;
  main.replaceChildren(
    h('h1', {}, 'Runs'), filters,
    rows.length
      ? h('table', { class: 'runs' },
        h('thead', {}, h('tr', {}, ['Run', 'State', 'Pipeline', 'Origin', 'Started', 'Duration',
          'Steps done'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, rows))
      : h('p', { class: 'muted empty' }, 'No runs match.'),
    h('nav', { class: 'pager', 'aria-label': 'pages' },
      q.get('cursor') ? h('a', { href: link({ cursor: '' }) }, '« First page') : null,
      cursor ? h('a', { href: link({ cursor }), rel: 'next' }, 'Next page »') : null));
}

function metrics(m) {
  const keys = Object.keys(m || {});
  if (!keys.length) return '—';
  return h('dl', { class: 'metrics' }, keys.flatMap((k) => [h('dt', {}, k),
    h('dd', {}, typeof m[k] === 'number' ? Number(m[k].toPrecision(6)) : JSON.stringify(m[k]))]));
}

function attempts(list) {
  if (!list || !list.length) return null;
  return h('details', {}, h('summary', {}, `${list.length} attempt(s)`),
    h('ol', {}, list.map((a) => h('li', {}, JSON.stringify(a)))));
}

function renderRun(main, run, live) {
  const steps = run.steps.map((s) => h('tr', { 'data-step': s.name },
    h('th', { scope: 'row' }, s.name),
    h('td', {}, s.type),
    h('td', {}, badge(s.state), s.reason ? h('span', { class: 'muted' }, ' ' + s.reason) : null),
    h('td', { class: 'num' }, String(s.attempts), attempts(s.attempts_detail)),
    h('td', { class: 'num' }, duration(s.started_at, s.finished_at)),
    h('td', {}, metrics(s.metrics))));
  main.replaceChildren(
    h('p', {}, h('a', { href: '#/runs' }, '« Runs')),
    h('h1', {}, 'Run ', h('code', {}, run.id), ' ', badge(run.state)),
    h('p', { class: 'live muted', 'aria-live': 'polite', 'data-live': live ? 'on' : 'off' },
      live ? '● live' : 'final'),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Pipeline'), h('dd', {}, run.pipeline),
      h('dt', {}, 'Created'), h('dd', {}, when(run.created_at)),
      h('dt', {}, 'Started'), h('dd', {}, when(run.started_at)),
      h('dt', {}, 'Duration'), h('dd', {}, duration(run.started_at, run.finished_at)),
      run.error ? [h('dt', {}, 'Error'), h('dd', { class: 'error' }, run.error)] : null),
    h('h2', {}, 'Steps'),
    h('table', { class: 'steps' },
      h('thead', {}, h('tr', {}, ['Step', 'Type', 'State', 'Attempts', 'Duration', 'Metrics']
        .map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, steps)));
}

const FINAL = new Set(['succeeded', 'failed', 'interrupted']);

// Returns a function that stops following the run.
export function runPage(main, id, rerender) {
  const ctl = new AbortController();
  const path = '/api/v1/runs/' + encodeURIComponent(id);
  let pending = null;
  const load = async () => {
    const run = await get(path);
    if (!ctl.signal.aborted) renderRun(main, run, !FINAL.has(run.state));
    return run;
  };
  const refresh = () => { // at most one reload in flight; events in a burst coalesce
    if (!pending) pending = load().finally(() => { pending = null; });
    return pending;
  };
  (async () => {
    try {
      const run = await load();
      if (FINAL.has(run.state)) return;
      await follow(path + '/events', () => refresh(), ctl.signal);
      await refresh();
    } catch (e) {
      if (!ctl.signal.aborted) problem(main, e, rerender);
    }
  })();
  return () => ctl.abort();
}
