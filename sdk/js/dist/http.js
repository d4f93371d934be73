/**
 * The HTTP transport of the SDK: one daemon address and API key, requests
 * through `fetch`, error answers turned into typed errors, event streams read
 * with their event names.
 *
 * @module
 */
import { ConnectionError, errorFromEventData, errorFromResponse, ForkboxError, InternalError } from "./errors.js";
import { readSSE } from "./sse.js";
/** The daemon address used when none is configured. */
export const DEFAULT_URL = "http://127.0.0.1:8080";
/**
 * How many items a list call asks the daemon for per page: the most it
 * gives. The daemon's lists are paged (limit and cursor; next_cursor in the
 * answer) and the SDK's list calls follow them to the last page.
 */
export const PAGE_SIZE = 1000;
/** A list that has not ended after this many pages is an error, not a loop. */
const MAX_PAGES = 100000;
/** SDK version, sent in the User-Agent header. */
export const VERSION = "0.1.0";
function env(name) {
    const v = typeof process !== "undefined" ? process.env?.[name] : undefined;
    return v === "" ? undefined : v;
}
/**
 * One daemon connection. Sandboxes, images and the client share it; it holds
 * no sockets of its own (fetch pools them).
 */
export class Transport {
    apiUrl;
    apiKey;
    fetchFn;
    constructor(opts = {}) {
        const url = opts.apiUrl ?? env("FORKBOX_URL") ?? DEFAULT_URL;
        this.apiUrl = url.replace(/\/+$/, "");
        const key = opts.apiKey ?? env("FORKBOX_API_KEY");
        this.apiKey = key === "" ? undefined : key;
        this.fetchFn = opts.fetch ?? globalThis.fetch.bind(globalThis);
    }
    /** The URL of a path with its query. */
    url(path, query) {
        let u = this.apiUrl + path;
        if (query) {
            const q = new URLSearchParams();
            for (const [k, v] of Object.entries(query)) {
                if (v === undefined)
                    continue;
                if (Array.isArray(v))
                    for (const x of v)
                        q.append(k, x);
                else
                    q.append(k, String(v));
            }
            const s = q.toString();
            if (s)
                u += "?" + s;
        }
        return u;
    }
    /**
     * Sends a request and returns the answer when its status is 2xx; any other
     * status becomes a typed error carrying the server's code and message. A
     * daemon that cannot be reached is a {@link ConnectionError}; an aborted
     * call rejects with the signal's reason.
     */
    async send(spec) {
        const headers = { "User-Agent": `forkbox-js/${VERSION}` };
        if (this.apiKey)
            headers["Authorization"] = `Bearer ${this.apiKey}`;
        let body = spec.body;
        if (spec.json !== undefined) {
            body = JSON.stringify(spec.json);
            headers["Content-Type"] = "application/json";
        }
        else if (spec.contentType) {
            headers["Content-Type"] = spec.contentType;
        }
        headers["Accept"] = spec.accept ?? "application/json";
        const init = { method: spec.method, headers, signal: spec.signal };
        if (body !== undefined) {
            init.body = body;
            if (typeof ReadableStream !== "undefined" && body instanceof ReadableStream)
                init.duplex = "half";
        }
        const url = this.url(spec.path, spec.query);
        let resp;
        try {
            resp = await this.fetchFn(url, init);
        }
        catch (err) {
            if (spec.signal?.aborted)
                throw spec.signal.reason ?? err;
            if (err instanceof ForkboxError)
                throw err;
            const cause = err?.cause;
            const why = cause?.code ?? cause?.message ?? err?.message ?? String(err);
            throw new ConnectionError("unavailable", 0, `cannot reach the forkbox daemon at ${this.apiUrl}: ${why}`, { cause: err });
        }
        if (!resp.ok) {
            let text = "";
            try {
                text = await resp.text();
            }
            catch {
                // the body broke off: the status says enough
            }
            throw errorFromResponse(resp.status, resp.statusText, text.slice(0, 64 << 10));
        }
        return resp;
    }
    /**
     * Every item of one of the daemon's paged lists (GET spec.path, the items
     * under `items`): asks for PAGE_SIZE at a time and follows `next_cursor`
     * to the last page. Also returns the first page's document, for what only
     * it carries.
     */
    async listAll(spec, items) {
        const query = { ...(spec.query ?? {}), limit: PAGE_SIZE };
        const out = [];
        let first;
        for (let n = 0; n < MAX_PAGES; n++) {
            const doc = (await this.json({ ...spec, method: "GET", query })) ?? {};
            first ??= doc;
            out.push(...(doc[items] ?? []));
            const next = typeof doc.next_cursor === "string" ? doc.next_cursor : "";
            if (!next)
                return { items: out, first };
            if (next === query.cursor) {
                throw new InternalError("internal", 0, `GET ${spec.path} answered the cursor it was sent as the next page's: the list cannot go on`);
            }
            query.cursor = next;
        }
        throw new InternalError("internal", 0, `GET ${spec.path} did not end after ${MAX_PAGES} pages`);
    }
    /** Sends a request and decodes its JSON answer (undefined for an empty one). */
    async json(spec) {
        const resp = await this.send(spec);
        const text = await resp.text();
        if (text === "")
            return undefined;
        try {
            return JSON.parse(text);
        }
        catch (err) {
            throw new InternalError("internal", resp.status, `decoding the answer of ${spec.method} ${spec.path}: ${err.message}`);
        }
    }
    /**
     * Sends a request asking for an event stream and hands each event to
     * onEvent until it returns true (the answer is complete). A daemon or proxy
     * that ignores Accept answers with plain JSON, which goes to onPlain
     * instead. A stream that ends before its last event is an error.
     */
    async stream(spec, what, onPlain, onEvent) {
        const resp = await this.send({ ...spec, accept: "text/event-stream" });
        const ctype = (resp.headers.get("Content-Type") ?? "").split(";")[0].trim().toLowerCase();
        if (ctype !== "text/event-stream") {
            const text = await resp.text();
            let v;
            try {
                v = JSON.parse(text);
            }
            catch (err) {
                throw new InternalError("internal", resp.status, `decoding the ${what} answer: ${err.message}`);
            }
            onPlain(v);
            return;
        }
        if (!resp.body)
            throw new InternalError("internal", resp.status, `${what} stream without a body`);
        const events = readSSE(resp.body);
        try {
            for (;;) {
                let r;
                try {
                    r = await events.next();
                }
                catch (err) {
                    if (spec.signal?.aborted)
                        throw spec.signal.reason ?? err;
                    throw new ConnectionError("unavailable", 0, `reading the ${what} stream: ${err?.message ?? err}`, { cause: err });
                }
                if (r.done)
                    break;
                // Errors of onEvent (a failure event, or a callback that threw) go
                // to the caller as they are.
                if (onEvent(r.value) === true)
                    return;
            }
        }
        finally {
            await events.return(undefined).catch(() => { });
        }
        throw new ConnectionError("unavailable", 0, `the ${what} stream ended before its end`);
    }
}
/** Decodes an event's JSON data, naming the event on failure. */
export function eventData(ev) {
    try {
        return JSON.parse(ev.data);
    }
    catch (err) {
        throw new InternalError("internal", 500, `decoding the ${ev.event} event: ${err.message}`);
    }
}
export { errorFromEventData };
/** The path /v1/sandboxes/{ref}{suffix} with the id or name escaped. */
export function sandboxPath(ref, suffix = "") {
    return "/v1/sandboxes/" + encodeURIComponent(ref) + suffix;
}
