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
/**
 * An error answer of the daemon (or a daemon that could not be reached).
 * `code` is the API's error code, `status` the HTTP status (0 when no answer
 * came), `message` the server's message.
 */
export class ForkboxError extends Error {
    /** The API's error code, such as `not_found`. */
    code;
    /** The HTTP status of the answer; 0 when the daemon could not be reached. */
    status;
    constructor(code, status, message, options) {
        super(message, options);
        this.code = code;
        this.status = status;
        this.name = new.target.name;
    }
}
/** 400 invalid_argument: a malformed request or a value out of range. */
export class InvalidArgumentError extends ForkboxError {
}
/** 401 unauthenticated: no API key, or a wrong one. */
export class AuthenticationError extends ForkboxError {
}
/** 403 permission_denied. */
export class PermissionDeniedError extends ForkboxError {
}
/** 404 not_found: an unknown sandbox, snapshot, image, context or file. */
export class NotFoundError extends ForkboxError {
}
/** 409 conflict: a name in use, or a state that forbids the call. */
export class ConflictError extends ForkboxError {
}
/**
 * 409 failed_precondition: the sandbox is not in a state for the call (not
 * running, terminated, suspended without auto-resume). A {@link ConflictError}.
 */
export class FailedPreconditionError extends ConflictError {
}
/**
 * 409 busy: another operation (a suspend, resume, checkpoint or create) holds
 * the sandbox for longer than the daemon waits; the message names it. Trying
 * again later may succeed. A {@link ConflictError}.
 */
export class BusyError extends ConflictError {
}
/** 413 too_large: a file or upload above the daemon's limit. */
export class TooLargeError extends ForkboxError {
}
/** 429 resource_exhausted: no room (disk, sandboxes) for the call. */
export class ResourceExhaustedError extends ForkboxError {
}
/**
 * 507 insufficient_storage: the host could give what was asked, but not now
 * (its free disk is reserved by other sandboxes).
 */
export class InsufficientStorageError extends ForkboxError {
}
/** 504 timeout: the daemon gave up waiting (a command's or a call's deadline). */
export class TimeoutError extends ForkboxError {
}
/** 503 unavailable: the daemon cannot do this now or on this host. */
export class UnavailableError extends ForkboxError {
}
/**
 * The daemon could not be reached at all (connection refused, DNS, reset).
 * An {@link UnavailableError} with status 0; `cause` is the network error.
 */
export class ConnectionError extends UnavailableError {
}
/** 500 internal, or a code this SDK does not know. */
export class InternalError extends ForkboxError {
}
const classByCode = {
    invalid_argument: InvalidArgumentError,
    unauthenticated: AuthenticationError,
    permission_denied: PermissionDeniedError,
    not_found: NotFoundError,
    conflict: ConflictError,
    failed_precondition: FailedPreconditionError,
    busy: BusyError,
    too_large: TooLargeError,
    resource_exhausted: ResourceExhaustedError,
    insufficient_storage: InsufficientStorageError,
    timeout: TimeoutError,
    unavailable: UnavailableError,
    internal: InternalError,
};
const statusByCode = {
    invalid_argument: 400,
    unauthenticated: 401,
    permission_denied: 403,
    not_found: 404,
    conflict: 409,
    failed_precondition: 409,
    busy: 409,
    too_large: 413,
    resource_exhausted: 429,
    insufficient_storage: 507,
    timeout: 504,
    unavailable: 503,
    internal: 500,
};
/**
 * Guesses an error code from an HTTP status, for error answers without a JSON
 * body (a proxy in between, say).
 */
export function codeForStatus(status) {
    switch (status) {
        case 400:
            return "invalid_argument";
        case 401:
            return "unauthenticated";
        case 403:
            return "permission_denied";
        case 404:
            return "not_found";
        case 409:
            return "conflict";
        case 413:
            return "too_large";
        case 429:
            return "resource_exhausted";
        case 504:
            return "timeout";
        case 502:
        case 503:
            return "unavailable";
        case 507:
            return "insufficient_storage";
    }
    return "internal";
}
/** The HTTP status that the daemon answers with for an error code. */
export function statusForCode(code) {
    return statusByCode[code] ?? 500;
}
/** Returns the typed error for a code, status and message. */
export function makeError(code, status, message, options) {
    const cls = classByCode[code] ?? InternalError;
    return new cls(code, status, message || code.replaceAll("_", " "), options);
}
/**
 * Turns an error answer (its status and body text) into a typed error: the
 * `{"error": {"code", "message"}}` body when there is one, else a code guessed
 * from the status and the body as the message (an HTML page is replaced by
 * the status line).
 */
export function errorFromResponse(status, statusText, body) {
    try {
        const parsed = JSON.parse(body);
        const e = parsed?.error;
        if (e && typeof e.code === "string" && e.code !== "") {
            return makeError(e.code, status, typeof e.message === "string" ? e.message : "");
        }
    }
    catch {
        // not JSON: fall through
    }
    let msg = body.trim();
    if (msg === "" || msg.includes("<")) {
        msg = `HTTP ${status}${statusText ? " " + statusText : ""}`;
    }
    return makeError(codeForStatus(status), status, msg);
}
/**
 * Turns the data of a stream's failure event (an `{"code", "message"}` body)
 * into a typed error with the status its code maps to.
 */
export function errorFromEventData(data) {
    try {
        const e = JSON.parse(data);
        if (e && typeof e.code === "string" && e.code !== "") {
            return makeError(e.code, statusForCode(e.code), typeof e.message === "string" ? e.message : "");
        }
    }
    catch {
        // fall through
    }
    return new InternalError("internal", 500, data || "the stream failed");
}
