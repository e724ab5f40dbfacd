// main.js — the dashboard's entry: routes the URL hash to a page (#/runs?filters,
// #/runs/ID?step=NAME, #/slices, #/models, #/models/NAME?a=V&b=W) and handles signing out.
// A change of query alone on the same run page is handed to that page, so choosing a step
// does not reload the run.
import { token } from './api.js';
import { signIn, runsPage, problem } from './views.js';
import { runPage } from './run.js';
import { slicesPage } from './slices.js';
import { modelsPage, modelPage } from './models.js';

const main = document.getElementById('main');
const signout = document.getElementById('signout');
let page = null; // {path, stop(), query(q)} of the page on screen

function route() {
  signout.hidden = !token.get();
  const hash = location.hash.replace(/^#/, '') || '/runs';
  const [path, query = ''] = hash.split('?');
  if (page && page.path === path && page.query && token.get() !== null) return page.query(query);
  if (page && page.stop) page.stop();
  page = null;
  if (token.get() === null) return signIn(main, null, route); // not signed in in this tab
  // a page that cannot go on (a refused token, a run gone) is stopped, so that signing in
  // again draws it anew rather than handing it the query
  let mine = null;
  const fail = (e) => {
    if (page && page === mine) { if (page.stop) page.stop(); page = null; }
    problem(main, e, route);
  };
  let m;
  for (const a of document.querySelectorAll('header nav a'))
    a.toggleAttribute('aria-current', path.startsWith(a.getAttribute('href').slice(1)));
  // each view names itself in the tab title (the run page adds its state as it changes)
  document.title = ((m = path.match(/^\/(runs|models)\/([^/]+)$/))
    ? `${m[1] === 'runs' ? 'Run' : 'Model'} ${decodeURIComponent(m[2])}`
    : path === '/slices' ? 'Slices' : path === '/models' ? 'Models' : 'Runs') + ' · tpuflow';
  if ((m = path.match(/^\/runs\/([^/]+)$/))) page = mine = { path, ...runPage(main, decodeURIComponent(m[1]), query, fail) };
  else if (path === '/slices') page = mine = { path, ...slicesPage(main, fail) };
  else if (path === '/models') modelsPage(main, fail);
  else if ((m = path.match(/^\/models\/([^/]+)$/))) modelPage(main, decodeURIComponent(m[1]), query, fail);
  else {
    const life = { ctl: new AbortController() };
    page = { path: null, stop() { life.ctl.abort(); } };
    runsPage(main, query, route, life);
  }
}

signout.addEventListener('click', () => {
  token.clear();
  if (page && page.stop) page.stop();
  page = null;
  signIn(main, null, route);
  signout.hidden = true;
});
addEventListener('hashchange', () => {
  const before = page;
  route();
  if ((page !== before || !page) && !main.querySelector('form.signin')) main.focus({ preventScroll: true });
});
route();
