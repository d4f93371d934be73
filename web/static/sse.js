// The UI's one parser of server-sent events (text/event-stream), as the
// WHATWG HTML standard defines it: one leading byte order mark is ignored;
// lines end in LF, CRLF or a lone CR; the data lines of one event are joined
// with LF; lines starting with ':' are comments; a blank line dispatches the
// event; an event without data is not dispatched; at the end of the stream a
// final event without its blank line is discarded, so a cut connection never
// yields half an event (the caller sees the stream end before its last event
// and says so). id and retry are accepted and ignored: nothing reconnects.
//
// It is the same algorithm as the TypeScript SDK's (sdk/js/src/sse.ts);
// web/test/sse.test.js feeds both the same streams and wants the same events.

/** SSEParser is incremental: feed it text in chunks split anywhere, even between the CR and LF of one line end. */
export class SSEParser {
  #pending = [];    // the line not yet ended, in the pieces it came in
  #cr = false;      // whether it ends with a CR (whose LF may come next)
  #started = false; // whether the stream's first character (a BOM?) was seen
  #name = '';
  #data = [];
  #hasData = false;

  /** push feeds a chunk of text and returns the events it completed: [{event, data}]. */
  push(chunk) {
    if (!this.#started && chunk) {
      this.#started = true;
      if (chunk.charCodeAt(0) === 0xfeff) chunk = chunk.slice(1);
    }
    // A chunk without a line end only adds to the line being read: it is
    // kept as it came and joined once the line ends, so a long line (a
    // chart's base64) that arrives in many chunks costs its length once,
    // not once per chunk.
    if (!this.#cr && lineEnd(chunk, 0) < 0) {
      if (chunk) this.#pending.push(chunk);
      return [];
    }
    this.#pending.push(chunk);
    return this.#drain(false);
  }

  /** end ends the stream and returns the events the rest completed; an event not closed by a blank line is dropped. */
  end() {
    const out = this.#drain(true);
    this.#pending = [];
    this.#cr = false;
    this.#started = false;
    this.#name = '';
    this.#data = [];
    this.#hasData = false;
    return out;
  }

  #drain(atEOF) {
    const out = [];
    const buf = this.#pending.join('');
    let start = 0;
    for (;;) {
      const i = lineEnd(buf, start);
      if (i < 0) break; // a partial line: kept (dropped at the end)
      let next = i + 1;
      if (buf.charCodeAt(i) === 13) {
        if (i + 1 < buf.length) {
          if (buf.charCodeAt(i + 1) === 10) next = i + 2;
        } else if (!atEOF) {
          break; // a CR last: its LF may come in the next chunk
        }
      }
      const ev = this.#line(buf.slice(start, i));
      if (ev) out.push(ev);
      start = next;
    }
    const rest = buf.slice(start);
    this.#pending = rest ? [rest] : [];
    this.#cr = rest.charCodeAt(rest.length - 1) === 13;
    return out;
  }

  #line(line) {
    if (line === '') {
      const ev = this.#hasData ? { event: this.#name || 'message', data: this.#data.join('\n') } : undefined;
      this.#name = '';
      this.#data = [];
      this.#hasData = false;
      return ev;
    }
    if (line.charCodeAt(0) === 58) return undefined; // ':' a comment
    let field = line;
    let value = '';
    const colon = line.indexOf(':');
    if (colon >= 0) {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.charCodeAt(0) === 32) value = value.slice(1);
    }
    if (field === 'event') {
      this.#name = value;
    } else if (field === 'data') {
      this.#data.push(value);
      this.#hasData = true;
    }
    return undefined;
  }
}

/** lineEnd is the index of the first CR or LF in s at or after from, or -1. */
function lineEnd(s, from) {
  for (let i = from; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 10 || c === 13) return i;
  }
  return -1;
}

/**
 * readSSE yields the events of a text/event-stream body (a ReadableStream of
 * bytes) as they arrive, UTF-8 decoded across chunk boundaries. It ends when
 * the body ends; leaving the loop early cancels the body.
 */
export async function* readSSE(body) {
  const parser = new SSEParser();
  // The parser drops the BOM itself, so the decoder must keep it.
  const decoder = new TextDecoder('utf-8', { ignoreBOM: true });
  const reader = body.getReader();
  let done = false;
  try {
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      yield* parser.push(decoder.decode(r.value, { stream: true }));
    }
    done = true;
    yield* parser.push(decoder.decode());
    yield* parser.end();
  } finally {
    if (!done) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}
