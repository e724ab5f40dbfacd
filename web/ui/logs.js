// logs.js — a step's logs, followed as they grow (GET .../logs?follow=true streams each
// attempt's log, a running one from its work directory), with a search that keeps the
// matching lines and a download of the whole text. Progress lines also feed the curves.
import { followText } from './api.js';
import { h } from './dom.js';

const SHOWN = 3000; // lines drawn when not searching (the download has them all)

export function logView(run, step, curves) {
  const path = `/api/v1/runs/${encodeURIComponent(run)}/steps/${encodeURIComponent(step)}/logs?follow=true`;
  const ctl = new AbortController();
  const lines = [];
  let partial = '', shown = 0, ended = false;
  const pre = h('pre', { class: 'log', tabindex: 0, 'aria-label': 'log' });
  const status = h('span', { class: 'muted', 'aria-live': 'polite' }, 'following…');
  const search = h('input', { type: 'search', placeholder: 'search the log', 'aria-label': 'search the log',
    oninput: () => draw(true) });
  const tail = h('input', { type: 'checkbox', checked: true, id: 'log-tail-' + step });
  const download = h('button', { type: 'button', onclick: () => {
    const a = h('a', { href: URL.createObjectURL(new Blob([lines.join('\n') + partial], { type: 'text/plain' })),
      download: `${run}-${step}.log` });
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  } }, 'Download');

  function draw(full) {
    const q = search.value;
    if (q) {
      const hits = lines.filter((l) => l.includes(q));
      pre.replaceChildren(hits.slice(-SHOWN).join('\n'));
      status.textContent = `${hits.length} of ${lines.length} lines match` + (ended ? '' : ' (following)');
      pre.dataset.matches = hits.length;
    } else {
      if (full || lines.length - SHOWN > shown) {
        const from = Math.max(0, lines.length - SHOWN);
        pre.replaceChildren(lines.slice(from).join('\n') + (lines.length > from ? '\n' : ''));
        shown = lines.length;
      } else if (shown < lines.length) {
        pre.append(lines.slice(shown).join('\n') + '\n');
        shown = lines.length;
      }
      status.textContent = `${lines.length} lines` + (ended ? '' : ' (following)');
      delete pre.dataset.matches;
    }
    pre.dataset.lines = lines.length;
    if (tail.checked) pre.scrollTop = pre.scrollHeight;
  }

  followText(path, (text) => {
    const parts = (partial + text).split('\n');
    partial = parts.pop();
    for (const l of parts) { lines.push(l); if (curves) curves.add(l); }
    draw(false);
  }, ctl.signal).then(() => {
    if (partial) { lines.push(partial); if (curves) curves.add(partial); partial = ''; }
    ended = true;
    pre.dataset.ended = 'true';
    draw(true);
  }).catch((e) => {
    if (!ctl.signal.aborted) status.textContent = 'log: ' + e.message;
  });

  const el = h('section', { class: 'logs' },
    h('div', { class: 'tools' }, search, h('label', {}, tail, ' follow the end'), download, status), pre);
  return { el, stop: () => ctl.abort() };
}
