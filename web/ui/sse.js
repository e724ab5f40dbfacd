// sse.js — the Server-Sent Events stream format, read as the HTML standard's "event stream
// interpretation" says (https://html.spec.whatwg.org/multipage/server-sent-events.html):
// lines end in CRLF, LF or CR (a CRLF cut between two reads is still one line end); a
// blank line dispatches the event; a line starting with ':' is a comment; `field: value`
// loses one space after the colon, no more, and a line without a colon is a field with an
// empty value; the `data:` lines of one event are joined with "\n"; an event without data
// is not dispatched; `id` persists until another `id` line (an empty one clears it) and is
// ignored when it holds NUL; `retry` is taken only when it is all ASCII digits; unknown
// fields are ignored. No browser API is used, so tests can run it anywhere.

// Returns a reader that calls onEvent(name, data) for each dispatched event (name
// 'message' when no `event:` was sent). push(text) feeds decoded text as it comes; reset()
// starts a new connection's stream (a partial event or line is dropped, as a broken
// connection drops it); .lastId and .retry (null until sent) are the stream's, kept across
// connections.
export function sseReader(onEvent) {
  const r = { lastId: '', retry: null };
  let line = '', name = '', data = '', afterCR = false, start = true;

  function field(l) {
    if (l === '') { // dispatch
      if (data !== '') onEvent(name || 'message', data.endsWith('\n') ? data.slice(0, -1) : data);
      name = '';
      data = '';
      return;
    }
    if (l[0] === ':') return;
    const colon = l.indexOf(':');
    const key = colon < 0 ? l : l.slice(0, colon);
    let value = colon < 0 ? '' : l.slice(colon + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (key === 'event') name = value;
    else if (key === 'data') data += value + '\n';
    else if (key === 'id') { if (!value.includes('\0')) r.lastId = value; }
    else if (key === 'retry') { if (/^[0-9]+$/.test(value)) r.retry = +value; }
  }

  r.push = (text) => {
    if (start && text) { start = false; if (text[0] === '\uFEFF') text = text.slice(1); }
    let i = 0;
    if (afterCR && text[0] === '\n') i = 1; // the LF of a CRLF cut between two reads
    afterCR = false;
    for (;;) {
      const cr = text.indexOf('\r', i), lf = text.indexOf('\n', i);
      const end = cr < 0 ? lf : lf < 0 ? cr : Math.min(cr, lf);
      if (end < 0) { line += text.slice(i); return; }
      field(line + text.slice(i, end));
      line = '';
      i = end + 1;
      if (text[end] === '\r') {
        if (i === text.length) { afterCR = true; return; }
        if (text[i] === '\n') i++;
      }
    }
  };
  r.reset = () => { line = ''; name = ''; data = ''; afterCR = false; start = true; };
  return r;
}
