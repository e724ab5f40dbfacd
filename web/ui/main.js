// main.js — the dashboard's entry: routes the URL hash to a page (#/runs?filters,
// #/runs/ID) and handles signing out.
import { token } from './api.js';
import { signIn, runsPage, runPage } from './views.js';

const main = document.getElementById('main');
const signout = document.getElementById('signout');
let stop = null;

function route() {
  if (stop) { stop(); stop = null; }
  signout.hidden = !token.get();
  if (token.get() === null) return signIn(main, null, route); // not signed in in this tab
  const hash = location.hash.replace(/^#/, '') || '/runs';
  const [path, query = ''] = hash.split('?');
  const m = path.match(/^\/runs\/([^/]+)$/);
  if (m) stop = runPage(main, decodeURIComponent(m[1]), route);
  else runsPage(main, query, route);
}

signout.addEventListener('click', () => {
  token.clear();
  signIn(main, null, route);
  signout.hidden = true;
});
addEventListener('hashchange', route);
route();
