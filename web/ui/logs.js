// logs.js — a step's logs, followed as they grow (GET .../logs?follow=true streams each
// attempt's log, a running one from its work directory), with a search that keeps the
// matching lines and a download of the whole text. Progress lines also feed the curves.
// What the stream sends is a prefix of the step's log whenever it is read (docs/api.md), so
// a stream that ends while the step is not final (the daemon stopped or restarted, the
// network dropped, the run was resumed) is opened again from the bytes already shown
// (?offset=, so they are not sent again): nothing is lost or shown twice.
import { followBytes, ApiError } from './api.js';
import { h } from './dom.js';

const SHOWN = 3000; // lines drawn when not searching (the download has them all)

// run, step: whose log; curves (or null) gets each line; final: whether the step is final
// now. Returns {el, stop(), sync(final)}: the run page calls sync with the step's state as
// it learns it.
export function logView(run, step, curves, final) {
  const path = `/api/v1/runs/${encodeURIComponent(run)}/steps/${encodeURIComponent(step)}/logs?follow=true`;
  const ctl = new AbortController();
  const lines = [];
  const decoder = new TextDecoder();
  let partial = '', shown = 0, got = 0, ended = false, streaming = false, timer = null, wait = 1000;
  const body = document.createTextNode(''), tailText = document.createTextNode('');
  const pre = h('pre', { class: 'log', tabindex: 0, 'aria-label': 'log' }, body, tailText);
  const status = h('span', { class: 'muted', 'aria-live': 'polite' }, 'following…');
  const search = h('input', { type: 'search', placeholder: 'search the log', 'aria-label': 'search the log',
    oninput: () => draw(true) });
  const tail = h('input', { type: 'checkbox', checked: true, id: 'log-tail-' + step });
  const download = h('button', { type: 'button', onclick: () => {
    const a = h('a', { href: URL.createObjectURL(new Blob([lines.map((l) => l + '\n').join('') + partial], { type: 'text/plain' })),
      download: `${run}-${step}.log` });
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  } }, 'Download');

  function draw(full) {
    const q = search.value;
    const state = ended ? '' : streaming ? ' (following)' : ' (reconnecting…)';
    if (q) {
      const hits = [...lines, ...(partial ? [partial] : [])].filter((l) => l.includes(q));
      pre.replaceChildren(hits.slice(-SHOWN).join('\n'));
      status.textContent = `${hits.length} of ${lines.length} lines match` + state;
      pre.dataset.matches = hits.length;
      shown = -1; // the full text is drawn again when the search is cleared
    } else {
      if (full || shown < 0 || lines.length - SHOWN > shown) {
        const from = Math.max(0, lines.length - SHOWN);
        pre.replaceChildren(body, tailText);
        body.data = lines.slice(from).map((l) => l + '\n').join('');
      } else if (shown < lines.length) {
        body.appendData(lines.slice(shown).map((l) => l + '\n').join(''));
      }
      shown = lines.length;
      tailText.data = partial; // a line still being written
      status.textContent = `${lines.length} lines` + state;
      delete pre.dataset.matches;
    }
    pre.dataset.lines = lines.length;
    if (tail.checked) pre.scrollTop = pre.scrollHeight;
  }

  function add(text) {
    const parts = (partial + text).split('\n');
    partial = parts.pop();
    for (const l of parts) { lines.push(l); if (curves) curves.add(l); }
  }

  function finish() {
    ended = true;
    if (partial && curves) curves.add(partial);
    pre.dataset.ended = 'true';
    draw(true);
  }

  async function open() {
    timer = null;
    ended = false;
    delete pre.dataset.ended;
    streaming = true;
    let broke = null, before = got;
    try {
      await followBytes(path, got, (b) => {
        got += b.length;
        add(decoder.decode(b, { stream: true }));
        draw(false);
      }, ctl.signal);
    } catch (e) {
      if (ctl.signal.aborted) return;
      if (e instanceof ApiError) { // refused (a token gone, a run deleted): said, not retried
        streaming = false;
        status.textContent = 'log: ' + e.message;
        return;
      }
      broke = e;
    }
    streaming = false;
    if (final && !broke) return finish(); // the step is final: this is the whole log
    // Ended or broken while the step is not known to be final: the stream ends by itself when
    // the step ends (the page learns it within a moment, and sync() then finishes), or it was
    // cut. Opened again after a wait that grows while nothing new comes.
    wait = got > before ? 1000 : Math.min(wait * 2, 30000);
    timer = setTimeout(open, wait);
    draw(false);
    if (broke) status.textContent = `log: ${broke.message}; reconnecting…`;
  }

  open();
  const el = h('section', { class: 'logs' },
    h('div', { class: 'tools' }, search, h('label', {}, tail, ' follow the end'), download, status), pre);
  return {
    el,
    stop: () => { ctl.abort(); clearTimeout(timer); },
    sync(isFinal) {
      final = isFinal;
      if (final && timer) { clearTimeout(timer); timer = null; open(); } // the rest, then the end
      else if (!final && ended) open(); // resumed or retried: new attempts come
    },
  };
}
