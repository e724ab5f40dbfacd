// models.js — the model registry: every model (#/models), and one (#/models/NAME?a=V&b=W):
// its versions with metrics and the run that made each (lineage), aliases, deployments with
// the canary share, serving health where the token may read it (a table per version, not
// the raw answer), and two versions compared side by side (the choice is in the URL).
import { get, whoami } from './api.js';
import { h, at, num, badge } from './dom.js';

const runLink = (id, step) => h('a', { href: `#/runs/${encodeURIComponent(id)}${step ? '?step=' + encodeURIComponent(step) : ''}` }, id);

// The serving health of a deployed model (GET /v1/models/NAME, scope predict or admin): one
// row per version an alias points at, with its aliases, its load state, the share of the
// bare path's traffic the active production deployment sends it, and its figures since the
// server started (requests, errors, error rate, p50 and p99 latency over its last answers).
function serving(m, health, name) {
  const prod = m.deployments.find((d) => d.active && d.alias === 'production');
  const share = (v) => {
    if (!prod) return null;
    if (prod.canary_version === v) return prod.canary_percent;
    if (prod.version === v) return 100 - (prod.canary_version ? prod.canary_percent : 0);
    return 0;
  };
  const aliases = (v) => (m.versions.find((x) => x.version === v) || {}).aliases || [];
  const box = h('div', { class: 'serving' });
  const draw = (hl) => box.replaceChildren(h('table', { class: 'health' },
    h('thead', {}, h('tr', {}, ['Version', 'Aliases', 'State', 'Traffic', 'Requests', 'Errors',
      'Error rate', 'p50', 'p99'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, hl.model_version_status.map((s) => {
      const v = +s.version, st = s.tpuflow_stats, sh = share(v);
      const bad = st && st.error_rate > 0;
      return h('tr', { 'data-version': v, 'data-requests': st ? st.requests : null,
        'data-errors': st ? st.errors : null, 'data-share': sh },
      h('td', { class: 'num' }, 'v' + v), h('td', {}, aliases(v).join(', ') || '—'),
      h('td', { title: s.status && s.status.error_message || null }, badge(s.state.toLowerCase()),
        s.status && s.status.error_message ? h('span', { class: 'muted' }, ' ' + s.status.error_message) : null),
      h('td', { class: 'num' }, sh === null ? '—' : num(sh) + ' %'),
      h('td', { class: 'num' }, st ? num(st.requests) : '—'),
      h('td', { class: 'num' }, st ? num(st.errors) : '—'),
      h('td', { class: 'num' + (bad ? ' down' : '') }, st ? (st.error_rate * 100).toFixed(1) + ' %' : '—'),
      h('td', { class: 'num' }, st && st.requests ? num(st.p50_ms) + ' ms' : '—'),
      h('td', { class: 'num' }, st && st.requests ? num(st.p99_ms) + ' ms' : '—'));
    }))),
  h('p', { class: 'muted' }, 'Figures since the server started; latency over each version\'s last 1,024 answers. ',
    h('button', { type: 'button', class: 'link', onclick: () => get('/v1/models/' + encodeURIComponent(name))
      .then(draw).catch((e) => box.append(h('p', { class: 'error' }, e.message))) }, 'Refresh')));
  draw(health);
  return box;
}

export async function modelsPage(main, problem) {
  let list;
  try { list = await get('/api/v1/models'); } catch (e) { return problem(e); }
  main.replaceChildren(h('h1', {}, 'Models'),
    list.items.length ? h('table', { class: 'models' },
      h('thead', {}, h('tr', {}, ['Model', 'Versions', 'Latest', 'Aliases', 'Created'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, list.items.map((m) => h('tr', { 'data-model': m.name },
        h('td', {}, h('a', { href: '#/models/' + encodeURIComponent(m.name) }, m.name)),
        h('td', { class: 'num' }, String(m.versions)), h('td', { class: 'num' }, 'v' + m.latest),
        h('td', {}, Object.entries(m.aliases || {}).map(([a, v]) => `${a} → v${v}`).join(', ') || '—'),
        h('td', {}, at(m.created_at))))))
      : h('p', { class: 'muted empty' }, 'No model is registered yet.'));
}

export async function modelPage(main, name, query, problem) {
  const q = new URLSearchParams(query);
  const base = '/api/v1/models/' + encodeURIComponent(name);
  let m, who, health = null;
  try {
    [m, who] = await Promise.all([get(base), whoami().catch(() => null)]);
    // serving status needs scope predict (or admin): asked only when the token has it
    if (who && who.scope === 'admin' && m.deployments.length)
      health = await get('/v1/models/' + encodeURIComponent(name)).catch(() => null);
  } catch (e) { return problem(e); }
  const keys = [...new Set(m.versions.flatMap((v) => Object.keys(v.metrics || {})))].sort();
  const versions = h('table', { class: 'versions' },
    h('thead', {}, h('tr', {}, ['Version', 'Aliases', 'Run', 'Created', ...keys].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, m.versions.map((v) => h('tr', { 'data-version': v.version },
      h('td', { class: 'num' }, 'v' + v.version), h('td', {}, (v.aliases || []).join(', ') || '—'),
      h('td', {}, runLink(v.run_id, v.step)), h('td', {}, at(v.created_at)),
      keys.map((k) => h('td', { class: 'num', 'data-metric': k }, v.metrics && k in v.metrics ? num(v.metrics[k]) : '—'))))));
  const opts = (sel) => m.versions.map((v) => h('option', { value: String(v.version), selected: String(v.version) === sel }, 'v' + v.version));
  const latest = m.versions.length ? String(m.versions[m.versions.length - 1].version) : '';
  const a = h('select', { id: 'cmp-a', name: 'a' }, opts(q.get('a') || (m.versions.length > 1 ? String(m.versions[m.versions.length - 2].version) : latest)));
  const b = h('select', { id: 'cmp-b', name: 'b' }, opts(q.get('b') || latest));
  const compareBox = h('div');
  const form = h('form', { class: 'filters', onsubmit: (e) => {
    e.preventDefault();
    location.hash = `#/models/${encodeURIComponent(name)}?a=${a.value}&b=${b.value}`;
  } }, h('label', { for: 'cmp-a' }, 'Compare'), a, h('label', { for: 'cmp-b' }, 'with'), b,
  h('button', { type: 'submit' }, 'Compare'));
  const deploys = m.deployments.length ? h('table', { class: 'deployments' },
    h('thead', {}, h('tr', {}, ['Alias', 'Version', 'Canary', 'Canary share', 'Previous', 'By run', 'Since', 'Active']
      .map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, m.deployments.map((d) => h('tr', { 'data-alias': d.alias },
      h('td', {}, d.alias), h('td', { class: 'num' }, 'v' + d.version),
      h('td', { class: 'num' }, d.canary_version ? 'v' + d.canary_version : '—'),
      h('td', { class: 'num' }, d.canary_version ? num(d.canary_percent) + ' %' : '—'),
      h('td', { class: 'num' }, d.previous_version ? 'v' + d.previous_version : '—'),
      h('td', {}, d.run_id ? runLink(d.run_id, d.step) : '—'), h('td', {}, at(d.created_at)),
      h('td', {}, d.active ? 'yes' : 'no')))))
    : h('p', { class: 'muted' }, 'Not deployed.');
  main.replaceChildren(h('p', {}, h('a', { href: '#/models' }, '« Models')),
    h('h1', {}, 'Model ', h('code', {}, name)),
    h('h2', {}, 'Versions'), versions,
    h('h2', {}, 'Deployments'), deploys,
    ...(health ? [h('h2', {}, 'Serving'), serving(m, health, name)] : []),
    h('h2', {}, 'Compare two versions'), form, compareBox);
  if (q.get('a') && q.get('b')) {
    try {
      const c = await get(`${base}:compare?a=${encodeURIComponent(q.get('a'))}&b=${encodeURIComponent(q.get('b'))}`);
      compareBox.replaceChildren(!Object.keys(c.metrics).length
        ? h('p', { class: 'muted empty-compare' }, `Neither v${c.a.version} nor v${c.b.version} has metrics to compare.`)
        : h('table', { class: 'compare' },
        h('thead', {}, h('tr', {}, ['Metric', 'v' + c.a.version, 'v' + c.b.version, 'Δ'].map((x) => h('th', { scope: 'col' }, x)))),
        h('tbody', {}, Object.entries(c.metrics).map(([k, r]) => h('tr', { 'data-metric': k },
          h('th', { scope: 'row' }, k), h('td', { class: 'num' }, num(r.a)), h('td', { class: 'num' }, num(r.b)),
          h('td', { class: 'num ' + (r.delta > 0 ? 'up' : r.delta < 0 ? 'down' : '') }, r.delta === null || r.delta === undefined ? '—' : (r.delta > 0 ? '+' : '') + num(r.delta)))))),
      h('p', { class: 'muted' }, 'made by ', runLink(c.a.run_id, c.a.step), ' and ', runLink(c.b.run_id, c.b.step)));
    } catch (e) { compareBox.replaceChildren(h('p', { class: 'error' }, e.message)); }
  }
}
