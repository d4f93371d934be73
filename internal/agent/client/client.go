// Package client is the daemon's client for a sandbox's agent
// (internal/agent/server): exec, files, code contexts, Jupyter messages and
// directory watches over HTTP/1.1 on the agent's Unix socket, in the bodies
// internal/agent/wire defines.
//
// The agent is the sandbox's, so every answer is treated as hostile: the
// socket is opened without following a link and checked to be a socket,
// streamed lines and answers are bounded, and what is relayed onwards is
// checked first. Connections are kept alive between calls; before a memory
// checkpoint, Quiesce closes them and waits until the agent has closed its
// ends too (conns.go says why).
package client

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
	"sync"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// Client talks to one sandbox's agent over its Unix socket. Connections are
// kept alive between calls; CloseIdle drops them (a checkpoint must see none).
type Client struct {
	socket string
	hc     *http.Client
	dir    *os.File // held open when the socket is reached through it
	conns  conns
	// dirMu keeps Close from closing dir under a dial; closed: Close ran,
	// and dials fail.
	dirMu  sync.RWMutex
	closed bool
}

// New returns a client for the agent listening on socket (a host
// path). The socket's directory belongs to the sandbox's root, so what
// stands at the socket's name is the sandbox's to choose: each connection
// opens that name without following a symlink, checks that it is a socket,
// and connects through the descriptor (/proc/self/fd/N), so a subverted
// agent cannot point the daemon at another sandbox's agent or at any other
// socket of the host. The directory is held open for the client's life (a
// deep data dir's path would not fit in a socket address anyway).
func New(socket string) *Client {
	dir, err := os.OpenFile(filepath.Dir(socket), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		// Calls fail with the reason when they dial.
		return newClient(socket, nil, err)
	}
	c := newClient(socket, dir, nil)
	c.dir = dir
	return c
}

func newClient(socket string, dir *os.File, openErr error) *Client {
	name := filepath.Base(socket)
	c := &Client{socket: socket}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			if openErr != nil {
				return nil, openErr
			}
			c.dirMu.RLock()
			if c.closed {
				c.dirMu.RUnlock()
				return nil, c.errClosed()
			}
			fd, err := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			c.dirMu.RUnlock()
			if err != nil {
				return nil, &os.PathError{Op: "open", Path: socket, Err: err}
			}
			defer unix.Close(fd)
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return nil, &os.PathError{Op: "stat", Path: socket, Err: err}
			}
			if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
				return nil, fmt.Errorf("agent socket %s is not a socket (mode %#o): refusing to connect", socket, st.Mode&unix.S_IFMT)
			}
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
			if err != nil {
				return nil, err
			}
			return c.conns.add(conn), nil
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     idleConnTimeout,
		DisableCompression:  true,
	}
	c.hc = &http.Client{Transport: tr}
	return c
}

// idleConnTimeout closes a connection to an agent unused this long.
const idleConnTimeout = 30 * time.Second

// Close releases the client's connections and handles.
// Calls made after it fail; a connection that a call under way returns
// afterwards goes within idleConnTimeout.
func (c *Client) Close() {
	c.dirMu.Lock()
	if c.dir != nil && !c.closed {
		c.dir.Close()
	}
	c.closed = true
	c.dirMu.Unlock()
	c.hc.CloseIdleConnections()
}

// errClosed is the error of a call on a closed client.
func (c *Client) errClosed() error {
	return fmt.Errorf("agent client of %s: closed", c.socket)
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader, ctype string) (*http.Response, error) {
	c.dirMu.RLock()
	closed := c.closed
	c.dirMu.RUnlock()
	if closed {
		return nil, c.errClosed()
	}
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
	var eb wire.ErrorBody
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

// Self asks the agent how its own process stands (see SelfReport).
func (c *Client) Self(ctx context.Context) (*wire.SelfReport, error) {
	resp, err := c.do(ctx, http.MethodGet, "/self", nil, nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var rep wire.SelfReport
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("decode self report: %w", err)
	}
	return &rep, nil
}

// Exec runs a command and calls onEvent for each output chunk as it arrives.
// It returns the exit status; an error means the call itself failed.
func (c *Client) Exec(ctx context.Context, req *wire.ExecRequest, onEvent func(wire.ExecEvent)) (*wire.ExitStatus, error) {
	var exit *wire.ExitStatus
	err := postStream(ctx, c, "/exec", req, "exec", func(ev *wire.ExecEvent) (bool, error) {
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
	dec := json.NewDecoder(&boundedLines{r: resp.Body, max: maxAnswerLine})
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
func (c *Client) ListFiles(ctx context.Context, path string) (string, []wire.FileEntry, error) {
	resp, err := c.do(ctx, http.MethodGet, "/files/list", url.Values{"path": {path}}, nil, "")
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Path    string           `json:"path"`
		Entries []wire.FileEntry `json:"entries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", nil, fmt.Errorf("decode list answer: %w", err)
	}
	return out.Path, out.Entries, nil
}

// maxAnswerLine bounds one line of an agent's streamed answer (a final
// execution with its logs and results): the agent is the sandbox's, and an
// answer without end would otherwise grow in the daemon's memory.
const maxAnswerLine = 64 << 20

// boundedLines reads r and fails once a line grows past max bytes.
type boundedLines struct {
	r    io.Reader
	max  int
	line int // bytes since the last newline
}

func (b *boundedLines) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	for _, c := range p[:n] {
		if c == '\n' {
			b.line = 0
			continue
		}
		if b.line++; b.line > b.max {
			return 0, errdefs.ResourceExhausted("the sandbox's answer has a line longer than %d MiB; refused", b.max>>20)
		}
	}
	return n, err
}

// ExecInput writes data (at most MaxExecInput bytes) to the stdin of the
// running exec id (started with KeepStdin) and, if closeStdin, closes it
// after.
func (c *Client) ExecInput(ctx context.Context, id string, data []byte, closeStdin bool) error {
	if len(data) > wire.MaxExecInput {
		return errdefs.TooLarge("exec input: %d bytes; at most %d at once", len(data), wire.MaxExecInput)
	}
	return c.postJSON(ctx, "/exec/input", wire.ExecInputRequest{ID: id, Data: data, Close: closeStdin})
}

// ExecSignal sends signal ("SIGTERM", "SIGKILL", "SIGINT" or "SIGHUP") to
// the process group of the running exec id.
func (c *Client) ExecSignal(ctx context.Context, id, signal string) error {
	return c.postJSON(ctx, "/exec/signal", wire.ExecSignalRequest{ID: id, Signal: signal})
}

// ExecResize sets the terminal size of the running exec id, started with
// a PTY.
func (c *Client) ExecResize(ctx context.Context, id string, size wire.PTYSize) error {
	if err := size.Check(); err != nil {
		return err
	}
	return c.postJSON(ctx, "/exec/resize", wire.ExecResizeRequest{ID: id, PTYSize: size})
}

// postJSON posts req as JSON to path and discards the answer.
func (c *Client) postJSON(ctx context.Context, path string, req any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, path, nil, bytes.NewReader(b), "application/json")
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return nil
}

// Watch streams the changes in directory path (and below it when
// recursive) to onEvent until ctx ends; it returns once the agent has
// confirmed the watch (onEvent's first event is Started) or failed.
func (c *Client) Watch(ctx context.Context, path string, recursive bool, onEvent func(wire.WatchEvent)) error {
	err := postStream(ctx, c, "/watch", &wire.WatchRequest{Path: path, Recursive: recursive}, "watch", func(ev *wire.WatchEvent) (bool, error) {
		onEvent(*ev)
		return false, nil
	})
	if ctx.Err() != nil {
		return nil // the caller ended it
	}
	return err
}
