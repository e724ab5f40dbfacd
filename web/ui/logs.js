// logs.js — a step's logs, shown as they grow, with a search that keeps the matching lines and
// a download of the whole text. Progress lines also feed the curves.
// The view holds no connection of its own while the log grows: the run page's event stream
// carries it (GET .../events?log=STEP&offset=N, docs/api.md), so a page of a live run holds
// one stream, not two, and four such windows leave the browser's six connections to the
// daemon room for the pages' other requests. Once the run is final the rest of the log is
// read with one request (GET .../logs?offset=N). What is sent is a prefix of the step's log
// whenever it is read, so a stream opened again from the bytes already shown (?offset=)
// loses or repeats nothing.
import { followBytes, ApiError } from './api.js';
import { h } from './dom.js';

const SHOWN = 3000; // lines drawn when not searching (the download has them all)

// run, step: whose log; curves (or null) gets each line. Returns {el, stop(), have(),
// feed(offset, bytes), end(), read()}: the run page hands it each `log` event of its stream
// (feed: the body's bytes from byte `offset`, one character per byte) and its `log-end`
// (end), asks have() for the bytes shown when it opens its stream again, and calls read()
// for the rest of a log that no stream carries (the run is final).
export function logView(run, step, curves) {
  const path = `/api/v1/runs/${encodeURIComponent(run)}/steps/${encodeURIComponent(step)}/logs`;
  const ctl = new AbortController();
  const lines = [];
  const decoder = new TextDecoder();
  let partial = '', shown = 0, got = 0, ended = false, reading = false, timer = null, wait = 1000;
  let frame = false; // a draw is asked for the next frame
  let trouble = '';
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
    const state = trouble ? ` (${trouble})` : ended ? '' : ' (following)';
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
    pre.dataset.bytes = got;
    if (tail.checked) pre.scrollTop = pre.scrollHeight;
  }

  // One draw a frame however many pieces come (a long log read from its start comes as
  // hundreds of them, and drawing each would keep the page from answering).
  function later() {
    if (frame) return;
    frame = true;
    requestAnimationFrame(() => { frame = false; draw(false); });
  }

  // bytes of the body from byte `offset`; those already shown are dropped
  function add(offset, bytes) {
    if (offset > got) return; // a gap (not sent by the server): the next stream asks from `got`
    if (offset < got) bytes = bytes.subarray(got - offset);
    if (!bytes.length) return;
    got += bytes.length;
    if (ended) { ended = false; delete pre.dataset.ended; } // more attempts (a resumed run)
    const parts = (partial + decoder.decode(bytes, { stream: true })).split('\n');
    partial = parts.pop();
    for (const l of parts) { lines.push(l); if (curves) curves.add(l); }
    trouble = '';
    later();
  }

  function finish() {
    if (ended) return;
    ended = true;
    if (partial && curves) curves.add(partial);
    pre.dataset.ended = 'true';
    draw(true);
  }

  async function read() {
    clearTimeout(timer);
    timer = null;
    if (ended || reading || ctl.signal.aborted) return;
    reading = true;
    try {
      await followBytes(path, got, (b) => add(got, b), ctl.signal);
      reading = false;
      finish();
    } catch (e) {
      reading = false;
      if (ctl.signal.aborted) return;
      trouble = 'log: ' + e.message;
      draw(false);
      if (e instanceof ApiError) return; // refused (a token gone, a run deleted): said, not retried
      wait = Math.min(wait * 2, 30000);
      timer = setTimeout(read, wait);
    }
  }

  const el = h('section', { class: 'logs' },
    h('div', { class: 'tools' }, search, h('label', {}, tail, ' follow the end'), download, status), pre);
  draw(true);
  return {
    el,
    stop: () => { ctl.abort(); clearTimeout(timer); },
    have: () => got,
    feed(offset, text) { // one character a byte (docs/api.md)
      const b = new Uint8Array(text.length);
      for (let i = 0; i < text.length; i++) b[i] = text.charCodeAt(i);
      add(offset, b);
    },
    end: finish,
    read,
  };
}
