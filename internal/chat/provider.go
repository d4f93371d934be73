package chat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// Defaults of provider configurations.
const (
	DefaultTimeout    = 5 * time.Minute
	DefaultMaxRetries = 1
	// DefaultMaxTokens bounds a model turn where the API requires a bound
	// (Anthropic).
	DefaultMaxTokens = 8192
	dialTimeout      = 10 * time.Second
	headerTimeout    = 3 * time.Minute
)

// newHTTPClient is the client of both providers: connecting fails fast, and
// a server that accepts but never answers is cut off; the stream itself is
// bounded by the Step's context.
func newHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = dialTimeout
	t.ResponseHeaderTimeout = headerTimeout
	return &http.Client{Transport: t}
}

// providerError is a failed call to a provider: its message names the
// provider, endpoint and model, and it wraps both an errdefs kind and the
// SDK's error.
type providerError struct {
	msg  string
	kind error
	err  error
}

func (e *providerError) Error() string   { return e.msg }
func (e *providerError) Unwrap() []error { return []error{e.kind, e.err} }

// wrapProviderError turns an SDK error into a providerError. parent is the
// caller's context (not the Step's, which has the timeout); status is the
// HTTP status of an API error, 0 if the call got no answer.
func wrapProviderError(parent context.Context, what, baseURL, model string, timeout time.Duration, status int, err error) error {
	where := fmt.Sprintf("%s at %s (model %s)", what, baseURL, model)
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("the call to the %s was interrupted: %w", where, parent.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return &providerError{kind: errdefs.ErrTimeout, err: err,
			msg: fmt.Sprintf("the %s did not answer within %s", where, timeout)}
	case status != 0:
		return &providerError{kind: errdefs.ErrUnavailable, err: err,
			msg: fmt.Sprintf("the %s refused the call with HTTP %d: %v", where, status, err)}
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, net.ErrClosed) {
		return &providerError{kind: errdefs.ErrUnavailable, err: err,
			msg: fmt.Sprintf("the %s is unreachable: %v", where, err)}
	}
	return &providerError{kind: errdefs.ErrUnavailable, err: err,
		msg: fmt.Sprintf("the call to the %s failed: %v", where, err)}
}
