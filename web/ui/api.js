// api.js — the dashboard's only way to its data: the REST API on the same origin, with the
// bearer token the user signed in with (kept in sessionStorage: gone with the tab).
import { sseReader } from './sse.js';

const KEY = 'tpuflow.token';

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (t) => sessionStorage.setItem(KEY, t),
  clear: () => sessionStorage.removeItem(KEY),
};

// An API error: status and the problem document's detail (RFC 9457).
export class ApiError extends Error {
  constructor(status, detail) {
    super(detail || `HTTP ${status}`);
    this.status = status;
  }
}

function headers() {
  const t = token.get();
  return t ? { Authorization: 'Bearer ' + t } : {};
}

async function failure(res) {
  let detail = '';
  try { detail = (await res.json()).detail; } catch { /* not a problem document */ }
  return new ApiError(res.status, detail);
}

export async function get(path) {
  const res = await fetch(path, { headers: headers() });
  if (!res.ok) throw await failure(res);
  return res.json();
}

// A POST that creates or changes something: JSON body, and an Idempotency-Key so a repeated
// click cannot make two runs.
export async function post(path, body) {
  const h = { ...headers(), 'Idempotency-Key': crypto.randomUUID() };
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const res = await fetch(path, { method: 'POST', headers: h,
    body: body === undefined ? undefined : JSON.stringify(body) });
  if (!res.ok) throw await failure(res);
  return res.json();
}

// What the caller may do: {scope, auth}; asked once per token.
let who = null, whoFor = null;
export async function whoami() {
  if (whoFor !== token.get()) { who = null; whoFor = token.get(); }
  if (!who) who = await get('/api/v1/whoami');
  return who;
}
export const mayTrigger = (w) => w && (w.scope === 'trigger' || w.scope === 'admin');

// A browser gives all the tabs of a profile six connections to one host over HTTP/1.1 (what
// the daemon speaks), and a request waits while a stream holds each of them. So a page holds
// one stream at most (a live run's page gets its step's log in its event stream, run.js), and
// streams are held only while the tab is shown: a tab hidden for HIDDEN_MS closes its stream;
// shown again, it opens it where it stopped (the last event id, the log from its byte count),
// so nothing is missed.
const HIDDEN_MS = 5000;
const hidden = () => document.visibilityState === 'hidden';

// Resolves once the tab is shown (at once if it is), or signal aborts.
function shown(signal) {
  return new Promise((resolve) => {
    if (!hidden() || signal.aborted) return resolve();
    const on = () => {
      if (hidden() && !signal.aborted) return;
      document.removeEventListener('visibilitychange', on);
      signal.removeEventListener('abort', on);
      resolve();
    };
    document.addEventListener('visibilitychange', on);
    signal.addEventListener('abort', on);
  });
}

// One connection's AbortController: aborted with signal, or (with .hidden set) once the tab
// has stayed hidden for HIDDEN_MS. Call .done() when the connection is over.
function connection(signal) {
  const c = new AbortController();
  let timer = null;
  const vis = () => {
    clearTimeout(timer);
    if (hidden()) timer = setTimeout(() => { c.hidden = true; c.abort(); }, HIDDEN_MS);
  };
  const stop = () => c.abort();
  if (signal.aborted) c.abort(); // (its abort event has gone: no request is made)
  signal.addEventListener('abort', stop);
  document.addEventListener('visibilitychange', vis);
  vis();
  c.done = () => {
    clearTimeout(timer);
    signal.removeEventListener('abort', stop);
    document.removeEventListener('visibilitychange', vis);
  };
  return c;
}

// Reads a streamed body (followed logs) until it ends or signal aborts, handing onBytes each
// chunk; the body starts at byte `from` (those a caller already has from an earlier read),
// asked with ?offset= so the server sends only what is new (docs/api.md). A read closed
// because the tab was hidden is opened again once it is shown, from where it was.
export async function followBytes(path, from, onBytes, signal) {
  let have = from; // bytes of the body the caller has
  for (;;) {
    await shown(signal);
    const c = connection(signal);
    try {
      const url = have ? `${path}${path.includes('?') ? '&' : '?'}offset=${have}` : path;
      const res = await fetch(url, { headers: headers(), signal: c.signal });
      if (!res.ok) throw await failure(res);
      const reader = res.body.getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        have += value.length;
        onBytes(value);
      }
    } catch (e) {
      if (!c.hidden || signal.aborted) throw e;
    } finally {
      c.done();
    }
  }
}

// Follows a Server-Sent Events stream with fetch (EventSource cannot send the Authorization
// header the API needs), read as the standard reads the format (sse.js): calls onEvent(name,
// data), data parsed as JSON (null when it is not), for each event until the stream sends
// `end` or signal aborts; it is closed while the tab is hidden (above) and opened again with
// the newest id once shown. path may be a function, asked at each (re)opening: a stream that
// carries a log names the bytes the page has by then. A stream that breaks is opened again after the server's `retry:`
// with the newest `id:` it sent as Last-Event-ID, so nothing is missed or repeated; an answer
// that is not 200 (a revoked token, a run gone) ends it with an ApiError. onOpen (optional)
// is called each time the stream is (re)opened.
export async function follow(path, onEvent, signal, onOpen) {
  let retry = 2000, ended = false;
  const sse = sseReader((name, data) => {
    let parsed = null;
    try { parsed = JSON.parse(data); } catch { /* keep null */ }
    onEvent(name, parsed);
    if (name === 'end') ended = true;
  });
  for (;;) {
    await shown(signal);
    const c = connection(signal);
    sse.reset();
    try {
      const h = headers();
      if (sse.lastId) h['Last-Event-ID'] = sse.lastId;
      const res = await fetch(typeof path === 'function' ? path() : path, { headers: h, signal: c.signal });
      if (!res.ok) throw await failure(res);
      if (onOpen) onOpen();
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        sse.push(value);
        if (sse.retry !== null) retry = sse.retry;
      }
    } catch (e) {
      if (signal.aborted || e instanceof ApiError) throw e;
    } finally {
      c.done();
    }
    if (ended || signal.aborted) return;
    if (c.hidden) continue; // closed while hidden: opened again once shown
    await new Promise((r) => { // the server's retry:, cut short by an abort
      const t = setTimeout(r, retry);
      signal.addEventListener('abort', () => { clearTimeout(t); r(); }, { once: true });
    });
  }
}
