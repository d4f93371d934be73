/**
 * A parser of server-sent events (text/event-stream), as the WHATWG HTML
 * standard defines it: lines end in LF, CRLF or a lone CR; the `data` lines of
 * one event are joined with LF; lines starting with `:` are comments; a blank
 * line dispatches the event; an event without data is not dispatched; a final
 * event without its blank line is discarded, so a cut connection never yields
 * half an event. The `id` and `retry` fields are accepted and ignored
 * (nothing reconnects).
 *
 * The parser is incremental: feed it text in chunks of any size, split
 * anywhere (even between the CR and LF of one line end).
 *
 * @module
 */

/** One dispatched event. */
export interface SSEEvent {
  /** The event's name; "message" when the stream gave none. */
  event: string;
  /** The event's data lines joined with LF. */
  data: string;
}

/** An incremental text/event-stream parser. */
export class SSEParser {
  private buf = "";
  private name = "";
  private data: string[] = [];
  private hasData = false;

  /** Feeds a chunk of text and returns the events it completed. */
  push(chunk: string): SSEEvent[] {
    this.buf += chunk;
    return this.drain(false);
  }

  /**
   * Ends the stream and returns the events the rest completed. An event not
   * closed by a blank line is dropped.
   */
  end(): SSEEvent[] {
    const out = this.drain(true);
    this.name = "";
    this.data = [];
    this.hasData = false;
    return out;
  }

  private drain(atEOF: boolean): SSEEvent[] {
    const out: SSEEvent[] = [];
    let start = 0;
    const buf = this.buf;
    for (;;) {
      let i = start;
      while (i < buf.length && buf[i] !== "\n" && buf[i] !== "\r") i++;
      if (i >= buf.length) {
        // No line end: keep the partial line (at EOF it is dropped, as a
        // line without its end cannot complete an event).
        break;
      }
      let next = i + 1;
      if (buf[i] === "\r") {
        if (i + 1 < buf.length) {
          if (buf[i + 1] === "\n") next = i + 2;
        } else if (!atEOF) {
          // A CR last: its LF may come in the next chunk.
          break;
        }
      }
      const ev = this.line(buf.slice(start, i));
      if (ev) out.push(ev);
      start = next;
    }
    this.buf = atEOF ? "" : buf.slice(start);
    return out;
  }

  private line(line: string): SSEEvent | undefined {
    if (line === "") {
      if (!this.hasData) {
        this.name = "";
        return undefined;
      }
      const ev = { event: this.name || "message", data: this.data.join("\n") };
      this.name = "";
      this.data = [];
      this.hasData = false;
      return ev;
    }
    if (line[0] === ":") return undefined;
    let field = line;
    let value = "";
    const colon = line.indexOf(":");
    if (colon >= 0) {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value[0] === " ") value = value.slice(1);
    }
    if (field === "event") {
      this.name = value;
    } else if (field === "data") {
      this.data.push(value);
      this.hasData = true;
    }
    return undefined;
  }
}

/**
 * Reads the events of a text/event-stream body as they arrive. UTF-8 is
 * decoded across chunk boundaries. The generator ends when the body ends;
 * breaking out of it cancels the body.
 */
export async function* readSSE(body: ReadableStream<Uint8Array>): AsyncGenerator<SSEEvent, void, undefined> {
  const parser = new SSEParser();
  const decoder = new TextDecoder("utf-8");
  const reader = body.getReader();
  let done = false;
  try {
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      for (const ev of parser.push(decoder.decode(r.value, { stream: true }))) yield ev;
    }
    done = true;
    for (const ev of parser.push(decoder.decode())) yield ev;
    for (const ev of parser.end()) yield ev;
  } finally {
    if (!done) {
      await reader.cancel().catch(() => {});
    }
    reader.releaseLock();
  }
}
