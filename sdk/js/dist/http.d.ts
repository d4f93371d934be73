/**
 * The HTTP transport of the SDK: one daemon address and API key, requests
 * through `fetch`, error answers turned into typed errors, event streams read
 * with their event names.
 *
 * @module
 */
import { errorFromEventData } from "./errors.js";
import { type SSEEvent } from "./sse.js";
/** The daemon address used when none is configured. */
export declare const DEFAULT_URL = "http://127.0.0.1:8080";
/**
 * How many items a list call asks the daemon for per page: the most it
 * gives. The daemon's lists are paged (limit and cursor; next_cursor in the
 * answer) and the SDK's list calls follow them to the last page.
 */
export declare const PAGE_SIZE = 1000;
/** SDK version, sent in the User-Agent header. */
export declare const VERSION = "0.1.0";
/** Where the daemon is and how to reach it. */
export interface ConnectionOptions {
    /** The daemon's address, such as "http://127.0.0.1:8080"; default FORKBOX_URL, else DEFAULT_URL. */
    apiUrl?: string;
    /** Sent as a bearer token; default FORKBOX_API_KEY. An empty key sends none. */
    apiKey?: string;
    /**
     * The fetch to use (default the global one). Node's fetch stops waiting for
     * an answer's headers after 300 s; pass an undici fetch with its own Agent
     * for calls that stay silent longer.
     */
    fetch?: typeof fetch;
}
/** Options that every call takes. */
export interface CallOptions {
    /** Cancels the call. */
    signal?: AbortSignal;
}
/** A request body that fetch takes. */
export type RequestBody = NonNullable<RequestInit["body"]>;
type Query = Record<string, string | number | boolean | string[] | undefined>;
/** A request as the transport builds it. */
export interface RequestSpec {
    method: string;
    path: string;
    query?: Query;
    /** A JSON value (sent as application/json) or a raw body with its type. */
    json?: unknown;
    body?: RequestBody;
    contentType?: string;
    accept?: string;
    signal?: AbortSignal;
}
/**
 * One daemon connection. Sandboxes, images and the client share it; it holds
 * no sockets of its own (fetch pools them).
 */
export declare class Transport {
    readonly apiUrl: string;
    readonly apiKey: string | undefined;
    private readonly fetchFn;
    constructor(opts?: ConnectionOptions);
    /** The URL of a path with its query. */
    url(path: string, query?: Query): string;
    /**
     * Sends a request and returns the answer when its status is 2xx; any other
     * status becomes a typed error carrying the server's code and message. A
     * daemon that cannot be reached is a {@link ConnectionError}; an aborted
     * call rejects with the signal's reason.
     */
    send(spec: RequestSpec): Promise<Response>;
    /**
     * Every item of one of the daemon's paged lists (GET spec.path, the items
     * under `items`): asks for PAGE_SIZE at a time and follows `next_cursor`
     * to the last page. Also returns the first page's document, for what only
     * it carries.
     */
    listAll<T>(spec: RequestSpec, items: string): Promise<{
        items: T[];
        first: Record<string, unknown>;
    }>;
    /** Sends a request and decodes its JSON answer (undefined for an empty one). */
    json<T>(spec: RequestSpec): Promise<T>;
    /**
     * Sends a request asking for an event stream and hands each event to
     * onEvent until it returns true (the answer is complete). A daemon or proxy
     * that ignores Accept answers with plain JSON, which goes to onPlain
     * instead. A stream that ends before its last event is an error.
     */
    stream(spec: RequestSpec, what: string, onPlain: (value: unknown) => void, onEvent: (ev: SSEEvent) => boolean | void): Promise<void>;
}
/** Decodes an event's JSON data, naming the event on failure. */
export declare function eventData<T>(ev: SSEEvent): T;
export { errorFromEventData };
/** The path /v1/sandboxes/{ref}{suffix} with the id or name escaped. */
export declare function sandboxPath(ref: string, suffix?: string): string;
