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
/** One dispatched event. */
export interface SSEEvent {
    /** The event's name; "message" when the stream gave none. */
    event: string;
    /** The event's data lines joined with LF. */
    data: string;
}
/** An incremental text/event-stream parser. */
export declare class SSEParser {
    /** The line not yet ended, in the pieces it came in. */
    private pending;
    /** Whether that line ends with a CR (whose LF may come next). */
    private cr;
    /** Whether the stream's first character (a byte order mark?) was seen. */
    private started;
    private name;
    private data;
    private hasData;
    /** Feeds a chunk of text and returns the events it completed. */
    push(chunk: string): SSEEvent[];
    /**
     * Ends the stream and returns the events the rest completed. An event not
     * closed by a blank line is dropped.
     */
    end(): SSEEvent[];
    private drain;
    private line;
}
/**
 * Reads the events of a text/event-stream body as they arrive. UTF-8 is
 * decoded across chunk boundaries. The generator ends when the body ends;
 * breaking out of it cancels the body.
 */
export declare function readSSE(body: ReadableStream<Uint8Array>): AsyncGenerator<SSEEvent, void, undefined>;
