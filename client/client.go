package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// DefaultURL is the daemon address used when none is configured.
const DefaultURL = "http://127.0.0.1:8080"

// Environment variables read by FromEnv.
const (
	EnvURL    = "FORKBOX_URL"
	EnvAPIKey = "FORKBOX_API_KEY"
)

// Client talks to one forkbox daemon. The zero value is not usable; create
// one with New or FromEnv.
type Client struct {
	baseURL   string
	apiKey    string
	hc        *http.Client
	pageLimit int
}

// Option configures a Client in New.
type Option func(*Client)

// WithAPIKey sends key as a bearer token on every request. An empty key sends
// no Authorization header.
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// WithPageLimit sets how many rows per request ListSandboxes,
// ListSnapshots, ImageList, ListImages and ListConversations ask for as
// they walk the daemon's pages (1–1000; default 1000, the most: the fewest
// round trips). They return every row whatever the size.
func WithPageLimit(n int) Option { return func(c *Client) { c.pageLimit = n } }

// WithHTTPClient replaces the HTTP client (default: a client without an
// overall timeout, since exec and file transfers may run long; bound calls
// with their context instead).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// New returns a client for the daemon at baseURL, such as
// "http://127.0.0.1:8080". An empty baseURL means DefaultURL.
func New(baseURL string, opts ...Option) *Client {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	c := &Client{baseURL: strings.TrimRight(baseURL, "/"), hc: &http.Client{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// FromEnv returns a client configured from FORKBOX_URL (default DefaultURL)
// and FORKBOX_API_KEY. Options given here override the environment.
func FromEnv(opts ...Option) *Client {
	return New(os.Getenv(EnvURL), append([]Option{WithAPIKey(os.Getenv(EnvAPIKey))}, opts...)...)
}

// BaseURL returns the daemon address this client talks to.
func (c *Client) BaseURL() string { return c.baseURL }

// APIError is an error answer of the daemon: the HTTP status and the
// machine-readable code and human message of its {"error": {...}} body.
// Unwrap returns the errdefs sentinel of the code, so
// errors.Is(err, errdefs.ErrNotFound) works on it.
type APIError struct {
	Status  int
	Code    string
	Message string
	// Quota is set on a 429 (ErrResourceExhausted) for a tenant's quota: the
	// quota, what the tenant holds, what the call asked for on top, and the
	// limit. It is nil for other errors, host limits included.
	Quota *api.QuotaExceeded
}

func (e *APIError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	if e.Code != "" {
		return strings.ReplaceAll(e.Code, "_", " ")
	}
	return fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
}

// Unwrap returns the errdefs sentinel for e.Code, or nil for an unknown code.
func (e *APIError) Unwrap() error { return errdefs.FromCode(e.Code) }

// The errdefs kinds, re-exported because programs outside the forkbox module
// cannot import internal/errdefs. They are the same values, so
// errors.Is(err, client.ErrNotFound) and errors.Is(err, errdefs.ErrNotFound)
// agree.
var (
	ErrInvalidArgument     = errdefs.ErrInvalidArgument
	ErrUnauthenticated     = errdefs.ErrUnauthenticated
	ErrPermissionDenied    = errdefs.ErrPermissionDenied
	ErrNotFound            = errdefs.ErrNotFound
	ErrConflict            = errdefs.ErrConflict
	ErrFailedPrecondition  = errdefs.ErrFailedPrecondition
	ErrBusy                = errdefs.ErrBusy
	ErrInsufficientStorage = errdefs.ErrInsufficientStorage
	ErrTooLarge            = errdefs.ErrTooLarge
	ErrResourceExhausted   = errdefs.ErrResourceExhausted
	ErrTimeout             = errdefs.ErrTimeout
	ErrUnavailable         = errdefs.ErrUnavailable
)

// codeForStatus guesses an error code when an error answer has no JSON body
// (a proxy in between, say).
func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_argument"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "permission_denied"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "conflict"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusTooManyRequests:
		return "resource_exhausted"
	case http.StatusGatewayTimeout:
		return "timeout"
	case http.StatusServiceUnavailable:
		return "unavailable"
	}
	return "internal"
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// decodeError turns a non-2xx response into an *APIError. It reads (a bounded
// part of) the body but does not close it.
func decodeError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var e api.Error
	if json.Unmarshal(body, &e) == nil && e.Error.Code != "" {
		return &APIError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message, Quota: e.Error.Quota}
	}
	msg := strings.TrimSpace(string(body))
	if msg == "" || strings.ContainsRune(msg, '<') { // empty, or an HTML error page
		msg = fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return &APIError{Status: resp.StatusCode, Code: codeForStatus(resp.StatusCode), Message: msg}
}

// sandboxPath returns /v1/sandboxes/{sandbox}{suffix} with the id or name escaped.
func sandboxPath(sandbox, suffix string) string {
	return "/v1/sandboxes/" + url.PathEscape(sandbox) + suffix
}

// newRequest builds a request for path (with query q, may be nil) on the daemon.
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	u := c.baseURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	req.Header.Set("User-Agent", "forkbox-go-client/"+Version)
	return req, nil
}

// send performs req and returns the response when its status is 2xx. On any
// other status it closes the body and returns an *APIError.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// doJSON sends in (when non-nil) as a JSON body and decodes the answer into
// out (when non-nil).
func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := decodeJSON(resp.Body, out); err != nil {
		return fmt.Errorf("decoding %s %s answer: %w", method, path, err)
	}
	return nil
}

// decodeJSON decodes one JSON value from r into out and drains the rest of
// r, so the connection can be reused.
func decodeJSON(r io.Reader, out any) error {
	if err := json.NewDecoder(r).Decode(out); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, r)
	return nil
}

// Health checks that the daemon is up: GET /healthz answers {"status":"ok"}.
func (c *Client) Health(ctx context.Context) error {
	var h struct {
		Status string `json:"status"`
	}
	if err := c.doJSON(ctx, http.MethodGet, "/healthz", nil, nil, &h); err != nil {
		return err
	}
	if h.Status != "ok" {
		return fmt.Errorf("daemon is not healthy: status %q", h.Status)
	}
	return nil
}
