"""Typed exceptions of the forkbox SDK.

Every failure of a call to the daemon is a :class:`ForkboxError` carrying the
API's machine-readable ``code``, the server's human ``message`` and the HTTP
``status``. The daemon answers errors as ``{"error": {"code", "message"}}``;
each code maps to one subclass, so callers can write::

    try:
        Sandbox.connect("nope")
    except NotFoundError as e:
        print(e.code, e.message)   # not_found sandbox "nope" not found

A cell that cannot finish is typed too (see ``Sandbox.run_code``): a cell
timeout raises :class:`CellTimeoutError` (a :class:`SandboxTimeoutError`) and a
dead kernel raises :class:`KernelDiedError`; both carry the partial
``execution``. An ordinary exception raised by the code itself (``NameError``,
``ZeroDivisionError``, ...) is not an SDK error: it is in ``execution.error``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

__all__ = [
    "ForkboxError",
    "InvalidArgumentError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "FailedPreconditionError",
    "TooLargeError",
    "ResourceExhaustedError",
    "SandboxTimeoutError",
    "UnavailableError",
    "InternalError",
    "ConnectionFailedError",
    "CellTimeoutError",
    "KernelDiedError",
    "error_from_response",
    "error_for_code",
]


class ForkboxError(Exception):
    """A failed forkbox call: ``code`` (``not_found``, ``invalid_argument``,
    ...), ``message`` (the server's words) and ``status`` (the HTTP status, 0
    when the daemon could not be reached)."""

    default_code = "internal"
    default_status = 500

    def __init__(self, code: Optional[str] = None, message: str = "", status: Optional[int] = None):
        self.code = code or self.default_code
        self.message = message or self.code.replace("_", " ")
        self.status = self.default_status if status is None else status
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return "%s(code=%r, message=%r, status=%r)" % (type(self).__name__, self.code, self.message, self.status)


class InvalidArgumentError(ForkboxError):
    """400: the request was malformed or a value is out of range."""

    default_code, default_status = "invalid_argument", 400


class AuthenticationError(ForkboxError):
    """401: no API key or a wrong one (set FORKBOX_API_KEY or pass api_key)."""

    default_code, default_status = "unauthenticated", 401


class PermissionDeniedError(ForkboxError):
    """403: the call is not allowed."""

    default_code, default_status = "permission_denied", 403


class NotFoundError(ForkboxError):
    """404: no such sandbox, snapshot, image, file, context, ..."""

    default_code, default_status = "not_found", 404


class ConflictError(ForkboxError):
    """409: the call clashes with existing state (a name in use, say)."""

    default_code, default_status = "conflict", 409


class FailedPreconditionError(ConflictError):
    """409: the object's state forbids the call (exec on a terminated
    sandbox, resume of a running one). A :class:`ConflictError` too."""

    default_code, default_status = "failed_precondition", 409


class BusyError(ConflictError):
    """409: another operation (a suspend, resume, checkpoint or create) holds
    the sandbox for longer than the daemon waits; the message names it. Trying
    again later may succeed. A :class:`ConflictError` too."""

    default_code, default_status = "busy", 409


class TooLargeError(ForkboxError):
    """413: the upload or request body is over the daemon's limit."""

    default_code, default_status = "too_large", 413


class ResourceExhaustedError(ForkboxError):
    """429: a host or quota limit was hit."""

    default_code, default_status = "resource_exhausted", 429


class InsufficientStorageError(ForkboxError):
    """507: the host could give what was asked, but not now (its free disk is
    reserved by other sandboxes); deleting some, or asking for less, helps."""

    default_code, default_status = "insufficient_storage", 507


class SandboxTimeoutError(ForkboxError):
    """504: an operation ran out of time (and the base of
    :class:`CellTimeoutError`)."""

    default_code, default_status = "timeout", 504


class UnavailableError(ForkboxError):
    """503: the daemon cannot serve this here (no CRIU, chat not configured,
    the sandbox's agent went away)."""

    default_code, default_status = "unavailable", 503


class InternalError(ForkboxError):
    """500: the daemon failed; the message says how."""

    default_code, default_status = "internal", 500


class ConnectionFailedError(UnavailableError):
    """The daemon could not be reached at all (refused, reset, DNS). status
    is 0; code is ``unavailable``."""

    default_code, default_status = "unavailable", 0


class CellTimeoutError(SandboxTimeoutError):
    """A ``run_code`` cell ran past its ``timeout`` and was interrupted. The
    context keeps its variables. ``execution`` holds what the cell printed
    before; the message is the server's."""

    default_code, default_status = "timeout", 200

    def __init__(self, code=None, message="", status=None, execution=None):
        super().__init__(code, message, status)
        self.execution = execution


class KernelDiedError(ForkboxError):
    """The kernel running a ``run_code`` cell died (out of memory, killed,
    ``os._exit``). The next call in that context starts a fresh kernel, so
    its variables are gone. ``execution`` holds what the cell printed
    before; the message is the server's (it names an out-of-memory kill)."""

    default_code, default_status = "kernel_died", 200

    def __init__(self, code=None, message="", status=None, execution=None):
        super().__init__(code, message, status)
        self.execution = execution


_BY_CODE: Dict[str, Type[ForkboxError]] = {
    "invalid_argument": InvalidArgumentError,
    "unauthenticated": AuthenticationError,
    "permission_denied": PermissionDeniedError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "failed_precondition": FailedPreconditionError,
    "busy": BusyError,
    "too_large": TooLargeError,
    "resource_exhausted": ResourceExhaustedError,
    "insufficient_storage": InsufficientStorageError,
    "timeout": SandboxTimeoutError,
    "unavailable": UnavailableError,
    "internal": InternalError,
}

_CODE_FOR_STATUS = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "conflict",
    413: "too_large",
    429: "resource_exhausted",
    503: "unavailable",
    507: "insufficient_storage",
    504: "timeout",
}

_STATUS_FOR_CODE = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "conflict": 409,
    "failed_precondition": 409,
    "busy": 409,
    "too_large": 413,
    "resource_exhausted": 429,
    "insufficient_storage": 507,
    "timeout": 504,
    "unavailable": 503,
    "internal": 500,
}


def error_for_code(code: str, message: str, status: Optional[int] = None) -> ForkboxError:
    """Returns the typed exception for an API error code (an unknown code, from
    a newer daemon, is a plain :class:`ForkboxError` keeping the code)."""
    cls = _BY_CODE.get(code, ForkboxError)
    if status is None:
        status = _STATUS_FOR_CODE.get(code, 500)
    return cls(code, message, status)


def error_from_response(status: int, body: bytes) -> ForkboxError:
    """Turns a non-2xx answer into a typed exception: from its
    ``{"error": {...}}`` body, or, when a proxy answered without one, from
    the status alone."""
    import json

    try:
        doc: Any = json.loads(body.decode("utf-8"))
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict) and err.get("code"):
            return error_for_code(str(err["code"]), str(err.get("message") or ""), status)
    except (ValueError, UnicodeDecodeError):
        pass
    text = body.decode("utf-8", "replace").strip()
    if not text or "<" in text:  # empty, or an HTML error page
        from http import HTTPStatus

        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        text = ("HTTP %d %s" % (status, phrase)).strip()
    return error_for_code(_CODE_FOR_STATUS.get(status, "internal"), text, status)
