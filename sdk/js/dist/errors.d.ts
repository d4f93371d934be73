/**
 * Typed errors of the forkbox SDK.
 *
 * Every error answer of the daemon carries a body `{"error": {"code", "message"}}`;
 * the SDK turns it into a {@link ForkboxError} of the subclass that matches the
 * code, keeping the server's message word for word. A call that fails after its
 * event stream began (a `failure` event of run_code, an `error` event of a
 * streaming command or a build) becomes the same typed error.
 *
 * A cell that raises (NameError, SyntaxError, TimeoutError of `timeoutMs`,
 * KernelDied, …) is not an error of the call: it comes back in
 * {@link Execution.error}. Errors are for calls that could not run.
 *
 * @module
 */
/** The machine-readable error codes of the forkbox API. */
export type ErrorCode = "invalid_argument" | "unauthenticated" | "permission_denied" | "not_found" | "conflict" | "failed_precondition" | "busy" | "too_large" | "resource_exhausted" | "insufficient_storage" | "timeout" | "unavailable" | "internal" | (string & {});
/**
 * An error answer of the daemon (or a daemon that could not be reached).
 * `code` is the API's error code, `status` the HTTP status (0 when no answer
 * came), `message` the server's message.
 */
export declare class ForkboxError extends Error {
    /** The API's error code, such as `not_found`. */
    readonly code: ErrorCode;
    /** The HTTP status of the answer; 0 when the daemon could not be reached. */
    readonly status: number;
    constructor(code: ErrorCode, status: number, message: string, options?: {
        cause?: unknown;
    });
}
/** 400 invalid_argument: a malformed request or a value out of range. */
export declare class InvalidArgumentError extends ForkboxError {
}
/** 401 unauthenticated: no API key, or a wrong one. */
export declare class AuthenticationError extends ForkboxError {
}
/** 403 permission_denied. */
export declare class PermissionDeniedError extends ForkboxError {
}
/** 404 not_found: an unknown sandbox, snapshot, image, context or file. */
export declare class NotFoundError extends ForkboxError {
}
/** 409 conflict: a name in use, or a state that forbids the call. */
export declare class ConflictError extends ForkboxError {
}
/**
 * 409 failed_precondition: the sandbox is not in a state for the call (not
 * running, terminated, suspended without auto-resume). A {@link ConflictError}.
 */
export declare class FailedPreconditionError extends ConflictError {
}
/**
 * 409 busy: another operation (a suspend, resume, checkpoint or create) holds
 * the sandbox for longer than the daemon waits; the message names it. Trying
 * again later may succeed. A {@link ConflictError}.
 */
export declare class BusyError extends ConflictError {
}
/** 413 too_large: a file or upload above the daemon's limit. */
export declare class TooLargeError extends ForkboxError {
}
/** 429 resource_exhausted: no room (disk, sandboxes) for the call. */
export declare class ResourceExhaustedError extends ForkboxError {
}
/**
 * 507 insufficient_storage: the host could give what was asked, but not now
 * (its free disk is reserved by other sandboxes).
 */
export declare class InsufficientStorageError extends ForkboxError {
}
/** 504 timeout: the daemon gave up waiting (a command's or a call's deadline). */
export declare class TimeoutError extends ForkboxError {
}
/** 503 unavailable: the daemon cannot do this now or on this host. */
export declare class UnavailableError extends ForkboxError {
}
/**
 * The daemon could not be reached at all (connection refused, DNS, reset).
 * An {@link UnavailableError} with status 0; `cause` is the network error.
 */
export declare class ConnectionError extends UnavailableError {
}
/** 500 internal, or a code this SDK does not know. */
export declare class InternalError extends ForkboxError {
}
/**
 * Guesses an error code from an HTTP status, for error answers without a JSON
 * body (a proxy in between, say).
 */
export declare function codeForStatus(status: number): ErrorCode;
/** The HTTP status that the daemon answers with for an error code. */
export declare function statusForCode(code: string): number;
/** Returns the typed error for a code, status and message. */
export declare function makeError(code: string, status: number, message: string, options?: {
    cause?: unknown;
}): ForkboxError;
/**
 * Turns an error answer (its status and body text) into a typed error: the
 * `{"error": {"code", "message"}}` body when there is one, else a code guessed
 * from the status and the body as the message (an HTML page is replaced by
 * the status line).
 */
export declare function errorFromResponse(status: number, statusText: string, body: string): ForkboxError;
/**
 * Turns the data of a stream's failure event (an `{"code", "message"}` body)
 * into a typed error with the status its code maps to.
 */
export declare function errorFromEventData(data: string): ForkboxError;
