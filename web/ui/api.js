// api.js — the dashboard's only way to its data: the REST API on the same origin, with the
// bearer token the user signed in with (kept in sessionStorage: gone with the tab).
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

// Reads a streamed text body (followed logs) chunk by chunk until it ends or signal aborts.
export async function followText(path, onText, signal) {
  const res = await fetch(path, { headers: headers(), signal });
  if (!res.ok) throw await failure(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    onText(value);
  }
}

// Follows a Server-Sent Events stream with fetch (EventSource cannot send the Authorization
// header the API needs): calls onEvent(name, data) for each event until the stream sends
// `end` or signal aborts. A stream that breaks is opened again after the server's `retry:`
// with the newest `id:` it sent as Last-Event-ID, so nothing is missed or repeated; an answer
// that is not 200 (a revoked token, a run gone) ends it with an ApiError. onOpen (optional)
// is called each time the stream is (re)opened.
export async function follow(path, onEvent, signal, onOpen) {
  let last = null, retry = 2000;
  for (;;) {
    let ended = false;
    try {
      const h = headers();
      if (last !== null) h['Last-Event-ID'] = last;
      const res = await fetch(path, { headers: h, signal });
      if (!res.ok) throw await failure(res);
      if (onOpen) onOpen();
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let name = 'message', data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) name = line.slice(6).trim();
            else if (line.startsWith('data:')) data += line.slice(5).trim();
            else if (line.startsWith('id:')) last = line.slice(3).trim();
            else if (line.startsWith('retry:')) retry = +line.slice(6) || retry;
          }
          if (!data) continue; // an id or retry alone: no event
          let parsed = null;
          try { parsed = JSON.parse(data); } catch { /* keep null */ }
          onEvent(name, parsed);
          if (name === 'end') ended = true;
        }
      }
    } catch (e) {
      if (signal.aborted || e instanceof ApiError) throw e;
    }
    if (ended || signal.aborted) return;
    await new Promise((r) => setTimeout(r, retry));
  }
}
