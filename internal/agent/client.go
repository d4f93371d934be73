package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// Client talks to one sandbox's agent over its Unix socket. Connections are
// kept alive between calls; CloseIdle drops them (a checkpoint must see none).
type Client struct {
	socket string
	hc     *http.Client
	dir    *os.File // held open when the socket is reached through it
}

// maxSocketPath is what fits in sockaddr_un.sun_path with its NUL.
const maxSocketPath = 107

// NewClient returns a client for the agent listening on socket (a host path).
func NewClient(socket string) *Client {
	addr := socket
	if len(socket) > maxSocketPath {
		// Deep data dirs make paths longer than a socket address holds:
		// reach the socket through an open handle on its directory instead.
		// The *os.File keeps the handle open as long as the client lives.
		if dir, err := os.OpenFile(filepath.Dir(socket), unix.O_PATH|unix.O_DIRECTORY, 0); err == nil {
			addr = fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(socket))
			c := newClient(addr)
			c.dir = dir
			return c
		}
	}
	return newClient(addr)
}

func newClient(addr string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		},
		MaxIdleConnsPerHost: 4,
		DisableCompression:  true,
	}
	return &Client{socket: addr, hc: &http.Client{Transport: tr}}
}

// CloseIdle closes idle connections to the agent.
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }

// Close releases the client's connections and handles.
func (c *Client) Close() {
	c.hc.CloseIdleConnections()
	if c.dir != nil {
		c.dir.Close()
	}
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader, ctype string) (*http.Response, error) {
	u := "http://agent" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("sandbox agent unreachable: %w", err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// decodeError turns an agent error answer into an errdefs error.
func decodeError(resp *http.Response) error {
	var eb ErrorBody
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
		return fmt.Errorf("sandbox agent: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return &agentError{kind: errdefs.FromCode(eb.Error.Code), msg: eb.Error.Message}
}

type agentError struct {
	kind error
	msg  string
}

func (e *agentError) Error() string { return e.msg }
func (e *agentError) Unwrap() error { return e.kind }

// Health checks that the agent answers.
func (c *Client) Health(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, "")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Exec runs a command and calls onEvent for each output chunk as it arrives.
// It returns the exit status; an error means the call itself failed.
func (c *Client) Exec(ctx context.Context, req *ExecRequest, onEvent func(ExecEvent)) (*ExitStatus, error) {
	var exit *ExitStatus
	err := postStream(ctx, c, "/exec", req, "exec", func(ev *ExecEvent) (bool, error) {
		if ev.Exit != nil {
			exit = ev.Exit
			return true, nil
		}
		if onEvent != nil {
			onEvent(*ev)
		}
		return false, nil
	})
	return exit, err
}

// postStream posts req as JSON to path and decodes the agent's NDJSON answer
// line by line into T, handing each to each until it reports the last line.
// A stream that ends before that is an error; what names it in messages.
func postStream[T any](ctx context.Context, c *Client, path string, req any, what string, each func(*T) (last bool, err error)) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, path, nil, bytes.NewReader(b), "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(lineReader(resp.Body))
	for {
		var ev T
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("%s stream from sandbox agent broke: %w", what, err)
		}
		if last, err := each(&ev); last || err != nil {
			return err
		}
	}
}

// ReadFile opens a file in the sandbox for reading; the caller closes it.
// size is the file's length.
func (c *Client) ReadFile(ctx context.Context, path string) (rc io.ReadCloser, size int64, err error) {
	resp, err := c.do(ctx, http.MethodGet, "/files", url.Values{"path": {path}}, nil, "")
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// WriteFile writes body to path (replacing it atomically), creating parents.
func (c *Client) WriteFile(ctx context.Context, path string, mode uint32, body io.Reader) (string, int64, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode), 8))
	}
	resp, err := c.do(ctx, http.MethodPut, "/files", q, body, "application/octet-stream")
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", 0, fmt.Errorf("decode write answer: %w", err)
	}
	return out.Path, out.Size, nil
}

// RemoveFile removes a file, or a directory (with its contents if recursive).
func (c *Client) RemoveFile(ctx context.Context, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	resp, err := c.do(ctx, http.MethodDelete, "/files", q, nil, "")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// ListFiles lists a directory; it returns the directory's absolute path.
func (c *Client) ListFiles(ctx context.Context, path string) (string, []FileEntry, error) {
	resp, err := c.do(ctx, http.MethodGet, "/files/list", url.Values{"path": {path}}, nil, "")
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Path    string      `json:"path"`
		Entries []FileEntry `json:"entries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", nil, fmt.Errorf("decode list answer: %w", err)
	}
	return out.Path, out.Entries, nil
}
