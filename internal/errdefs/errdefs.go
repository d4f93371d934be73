// Package errdefs holds the small set of error kinds that every forkbox layer
// wraps its errors in. The HTTP layer maps each kind to one status code in one
// place (HTTPStatus), so a handler never chooses a status by itself.
//
// Wrap with fmt.Errorf("...: %w", errdefs.ErrNotFound) or use the helpers,
// which keep the message readable: errdefs.NotFound("sandbox %q", id).
package errdefs

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Sentinel kinds. Test with errors.Is.
var (
	ErrInvalidArgument     = errors.New("invalid argument")
	ErrUnauthenticated     = errors.New("unauthenticated")
	ErrPermissionDenied    = errors.New("permission denied")
	ErrNotFound            = errors.New("not found")
	ErrConflict            = errors.New("conflict")
	ErrFailedPrecondition  = errors.New("failed precondition")
	ErrBusy                = errors.New("busy")
	ErrTooLarge            = errors.New("too large")
	ErrResourceExhausted   = errors.New("resource exhausted")
	ErrInsufficientStorage = errors.New("insufficient storage")
	ErrTimeout             = errors.New("timeout")
	ErrUnavailable         = errors.New("unavailable")
)

// kindError carries a human message and the kind it belongs to. Its Error()
// is the message alone, so API clients see "sandbox \"x\" not found" rather
// than a chain of prefixes.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func newKind(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// InvalidArgument reports bad input (HTTP 400).
func InvalidArgument(format string, args ...any) error {
	return newKind(ErrInvalidArgument, format, args...)
}

// NotFound reports a missing object (HTTP 404).
func NotFound(format string, args ...any) error { return newKind(ErrNotFound, format, args...) }

// Conflict reports a clash with existing state, such as a duplicate name (HTTP 409).
func Conflict(format string, args ...any) error { return newKind(ErrConflict, format, args...) }

// FailedPrecondition reports an operation that the object's state forbids,
// such as exec on a terminated sandbox (HTTP 409).
func FailedPrecondition(format string, args ...any) error {
	return newKind(ErrFailedPrecondition, format, args...)
}

// Busy reports an object that another operation holds for longer than a
// caller may wait, such as a sandbox in the middle of a suspend (HTTP 409,
// code "busy"): trying again later may succeed.
func Busy(format string, args ...any) error { return newKind(ErrBusy, format, args...) }

// TooLarge reports an oversized request (HTTP 413).
func TooLarge(format string, args ...any) error { return newKind(ErrTooLarge, format, args...) }

// ResourceExhausted reports a host or quota limit (HTTP 429).
func ResourceExhausted(format string, args ...any) error {
	return newKind(ErrResourceExhausted, format, args...)
}

// InsufficientStorage reports a request that this host could serve but not
// now, for want of disk space that others hold: the disks promised to live
// sandboxes, say (HTTP 507, code "insufficient_storage"). Deleting some, or
// asking for less, makes it fit.
func InsufficientStorage(format string, args ...any) error {
	return newKind(ErrInsufficientStorage, format, args...)
}

// Timeout reports an operation that ran out of time (HTTP 504).
func Timeout(format string, args ...any) error { return newKind(ErrTimeout, format, args...) }

// Unavailable reports a feature that this host or configuration cannot serve (HTTP 503).
func Unavailable(format string, args ...any) error {
	return newKind(ErrUnavailable, format, args...)
}

// PermissionDenied reports an operation the caller may not do (HTTP 403).
func PermissionDenied(format string, args ...any) error {
	return newKind(ErrPermissionDenied, format, args...)
}

// Unauthenticated reports a missing or wrong credential (HTTP 401).
func Unauthenticated(format string, args ...any) error {
	return newKind(ErrUnauthenticated, format, args...)
}

var table = []struct {
	kind   error
	status int
	code   string
}{
	{ErrInvalidArgument, http.StatusBadRequest, "invalid_argument"},
	{ErrUnauthenticated, http.StatusUnauthorized, "unauthenticated"},
	{ErrPermissionDenied, http.StatusForbidden, "permission_denied"},
	{ErrNotFound, http.StatusNotFound, "not_found"},
	{ErrConflict, http.StatusConflict, "conflict"},
	{ErrFailedPrecondition, http.StatusConflict, "failed_precondition"},
	{ErrBusy, http.StatusConflict, "busy"},
	{ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
	{ErrResourceExhausted, http.StatusTooManyRequests, "resource_exhausted"},
	{ErrInsufficientStorage, http.StatusInsufficientStorage, "insufficient_storage"},
	{ErrTimeout, http.StatusGatewayTimeout, "timeout"},
	{ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
}

// HTTPStatus maps an error to its HTTP status and API error code. Errors of no
// known kind are internal (500).
func HTTPStatus(err error) (int, string) {
	for _, t := range table {
		if errors.Is(err, t.kind) {
			return t.status, t.code
		}
	}
	return http.StatusInternalServerError, "internal"
}

// FromCode is the inverse of HTTPStatus for clients: it returns the sentinel
// for an API error code, or nil when the code is unknown.
func FromCode(code string) error {
	for _, t := range table {
		if t.code == code {
			return t.kind
		}
	}
	return nil
}

// retryError says when a call that failed is worth trying again.
type retryError struct {
	error
	after time.Duration
}

func (e *retryError) Unwrap() error { return e.error }

// RetryAfter marks err as worth retrying after d (HTTP's Retry-After).
func RetryAfter(err error, d time.Duration) error { return &retryError{err, d} }

// RetryAfterOf is how long after err a retry makes sense; 0: not said.
func RetryAfterOf(err error) time.Duration {
	var r *retryError
	if errors.As(err, &r) {
		return r.after
	}
	return 0
}
