/**
 * A parser of server-sent events (text/event-stream), as the WHATWG HTML
 * standard defines it: one leading byte order mark is ignored; lines end in
 * LF, CRLF or a lone CR; the `data` lines of one event are joined with LF;
 * lines starting with `:` are comments; a blank line dispatches the event; an
 * event without data is not dispatched; a final event without its blank line
 * is discarded, so a cut connection never yields half an event. The `id` and
 * `retry` fields are accepted and ignored (nothing reconnects).
 *
 * The parser is incremental: feed it text in chunks of any size, split
 * anywhere (even between the CR and LF of one line end). The web UI reads
 * event streams with this same parser: web/static/sse.js is a copy of the
 * compiled dist/sse.js, kept identical by web's TestSSEIsTheSDKs.
 *
 * @module
 */
/** An incremental text/event-stream parser. */
export class SSEParser {
    /** The line not yet ended, in the pieces it came in. */
    pending = [];
    /** Whether that line ends with a CR (whose LF may come next). */
    cr = false;
    /** Whether the stream's first character (a byte order mark?) was seen. */
    started = false;
    name = "";
    data = [];
    hasData = false;
    /** Feeds a chunk of text and returns the events it completed. */
    push(chunk) {
        if (!this.started && chunk !== "") {
            this.started = true;
            if (chunk.charCodeAt(0) === 0xfeff)
                chunk = chunk.slice(1);
        }
        // A chunk without a line end only adds to the line being read: it is
        // kept as it came and joined once the line ends, so a long line (a
        // chart's base64) that arrives in many chunks costs its length once, not
        // once per chunk.
        if (!this.cr && lineEnd(chunk, 0) < 0) {
            if (chunk !== "")
                this.pending.push(chunk);
            return [];
        }
        this.pending.push(chunk);
        return this.drain(false);
    }
    /**
     * Ends the stream and returns the events the rest completed. An event not
     * closed by a blank line is dropped.
     */
    end() {
        const out = this.drain(true);
        this.pending = [];
        this.cr = false;
        this.started = false;
        this.name = "";
        this.data = [];
        this.hasData = false;
        return out;
    }
    drain(atEOF) {
        const out = [];
        const buf = this.pending.join("");
        let start = 0;
        for (;;) {
            const i = lineEnd(buf, start);
            if (i < 0) {
                // No line end: keep the partial line (at EOF it is dropped, as a
                // line without its end cannot complete an event).
                break;
            }
            let next = i + 1;
            if (buf.charCodeAt(i) === 13) {
                if (i + 1 < buf.length) {
                    if (buf.charCodeAt(i + 1) === 10)
                        next = i + 2;
                }
                else if (!atEOF) {
                    // A CR last: its LF may come in the next chunk.
                    break;
                }
            }
            const ev = this.line(buf.slice(start, i));
            if (ev)
                out.push(ev);
            start = next;
        }
        const rest = buf.slice(start);
        this.pending = rest === "" ? [] : [rest];
        this.cr = rest.charCodeAt(rest.length - 1) === 13;
        return out;
    }
    line(line) {
        if (line === "") {
            const ev = this.hasData ? { event: this.name || "message", data: this.data.join("\n") } : undefined;
            this.name = "";
            this.data = [];
            this.hasData = false;
            return ev;
        }
        if (line[0] === ":")
            return undefined;
        let field = line;
        let value = "";
        const colon = line.indexOf(":");
        if (colon >= 0) {
            field = line.slice(0, colon);
            value = line.slice(colon + 1);
            if (value[0] === " ")
                value = value.slice(1);
        }
        if (field === "event") {
            this.name = value;
        }
        else if (field === "data") {
            this.data.push(value);
            this.hasData = true;
        }
        return undefined;
    }
}
/** The index of the first CR or LF in s at or after from, or -1. */
function lineEnd(s, from) {
    for (let i = from; i < s.length; i++) {
        const c = s.charCodeAt(i);
        if (c === 10 || c === 13)
            return i;
    }
    return -1;
}
/**
 * Reads the events of a text/event-stream body as they arrive. UTF-8 is
 * decoded across chunk boundaries. The generator ends when the body ends;
 * breaking out of it cancels the body.
 */
export async function* readSSE(body) {
    const parser = new SSEParser();
    // The parser drops the byte order mark itself, so the decoder keeps it.
    const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
    const reader = body.getReader();
    let done = false;
    try {
        for (;;) {
            const r = await reader.read();
            if (r.done)
                break;
            for (const ev of parser.push(decoder.decode(r.value, { stream: true })))
                yield ev;
        }
        done = true;
        for (const ev of parser.push(decoder.decode()))
            yield ev;
        for (const ev of parser.end())
            yield ev;
    }
    finally {
        if (!done) {
            await reader.cancel().catch(() => { });
        }
        reader.releaseLock();
    }
}
