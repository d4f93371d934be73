package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/client"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// The agent's tests run on the host, as whoever runs them: a temporary
// directory stands in for the sandbox's root, and the sandbox user is the
// test's own uid and gid. Commands, kernels and file work then need no
// privilege (see server.credential); what only root can check (a command
// started as another user, file work with another user's rights) skips
// without root.

// The reaper reaps every child of the test binary: no test of this package
// may wait for a child of its own (os/exec). Every test server shares it.
var (
	testReaperOnce sync.Once
	testReaper     *reaper
)

// testServer is a server whose root is a fresh temporary directory and
// whose sandbox user is the current user.
func testServer(t *testing.T) (*server, string) {
	t.Helper()
	root := t.TempDir()
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	testReaperOnce.Do(func() { testReaper = newReaper() })
	s := &server{
		cfg:    wire.Config{UID: os.Getuid(), GID: os.Getgid(), WorkDir: "/workspace"},
		log:    slog.New(slog.DiscardHandler),
		rootFD: fd,
		reaper: testReaper,
	}
	return s, root
}

// testAgent is the daemon's client for a test server, served on a Unix
// socket, and a plain HTTP client for the requests the daemon's client
// never sends (malformed or over its limits).
type testAgent struct {
	*client.Client
	raw  *http.Client
	sock string
}

// serveTestAgent serves s's routes on a Unix socket and returns a client.
// s is not to be changed afterwards: its handlers read it.
func serveTestAgent(t *testing.T, s *server) *testAgent {
	t.Helper()
	if s.ctxs.byID == nil {
		s.ctxs.byID = map[string]*codeContext{}
	}
	return serveHTTP(t, s.httpServer())
}

// serveHTTP serves srv on a Unix socket and returns clients for it.
func serveHTTP(t *testing.T, srv *http.Server) *testAgent {
	t.Helper()
	sock := filepath.Join(t.TempDir(), wire.SocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := client.New(sock)
	t.Cleanup(c.Close)
	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	t.Cleanup(raw.CloseIdleConnections)
	return &testAgent{Client: c, raw: raw, sock: sock}
}

// startAgent serves a test server (testServer) and returns a client for it
// and the server's root.
func startAgent(t *testing.T) (*testAgent, string) {
	t.Helper()
	s, root := testServer(t)
	return serveTestAgent(t, s), root
}

// send sends body to path as it is and returns the agent's error answer
// as the daemon's client does: its message, of the kind its code names.
func (a *testAgent) send(ctx context.Context, method, path, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.raw.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 300 {
		return nil
	}
	var eb wire.ErrorBody
	if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
		return fmt.Errorf("HTTP %d: %w", resp.StatusCode, err)
	}
	return fmt.Errorf("%s (HTTP %d): %w", eb.Error.Message, resp.StatusCode, errdefs.FromCode(eb.Error.Code))
}

// sendJSON sends v as JSON (see send).
func (a *testAgent) sendJSON(ctx context.Context, path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return a.send(ctx, http.MethodPost, path, string(b))
}

func wantKind(t *testing.T, what string, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Errorf("%s: %v, want %v", what, err, kind)
	}
}

// waitFor waits until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("no %s", what)
}

// bgExec is an exec running in the background: started is closed once the
// agent reports the start (or the call ended), the output is collected as
// it streams, and the exit status arrives on done.
type bgExec struct {
	started chan struct{}
	done    chan *wire.ExitStatus
	err     error // the call's, set before done receives

	mu      sync.Mutex
	out     strings.Builder   // every stream, in arrival order
	streams map[string]string // each stream's output
}

// startBg starts req and returns once it started.
func startBg(t *testing.T, c *testAgent, req *wire.ExecRequest) *bgExec {
	t.Helper()
	return startBgCtx(t, context.Background(), c, req)
}

// startBgCtx is startBg with the call's context.
func startBgCtx(t *testing.T, ctx context.Context, c *testAgent, req *wire.ExecRequest) *bgExec {
	t.Helper()
	b := &bgExec{started: make(chan struct{}), done: make(chan *wire.ExitStatus, 1), streams: map[string]string{}}
	var once sync.Once
	go func() {
		st, err := c.Exec(ctx, req, func(ev wire.ExecEvent) {
			if ev.Started {
				once.Do(func() { close(b.started) })
			}
			b.mu.Lock()
			if ev.Stream != "" {
				b.streams[ev.Stream] += string(ev.Data)
			}
			b.out.Write(ev.Data)
			b.mu.Unlock()
		})
		b.err = err
		once.Do(func() { close(b.started) })
		b.done <- st
	}()
	select {
	case <-b.started:
	case <-time.After(10 * time.Second):
		t.Fatal("exec did not start")
	}
	return b
}

func (b *bgExec) output() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out.String()
}

// stream returns what came on one stream ("stdout", "stderr", "pty"), and
// whether anything came on it.
func (b *bgExec) stream(name string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.streams[name]
	return s, ok
}

// waitFor waits until the output contains want.
func (b *bgExec) waitFor(t *testing.T, want string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%q in the output", want), func() bool { return strings.Contains(b.output(), want) })
}

// wait returns the exit status; the call must not have failed.
func (b *bgExec) wait(t *testing.T) *wire.ExitStatus {
	t.Helper()
	select {
	case st := <-b.done:
		if b.err != nil {
			t.Fatalf("exec: %v", b.err)
		}
		return st
	case <-time.After(10 * time.Second):
		t.Fatal("exec did not end")
		return nil
	}
}

// runExec runs req to its end and returns its status and output.
func runExec(t *testing.T, c *testAgent, req *wire.ExecRequest) (*wire.ExitStatus, *bgExec) {
	t.Helper()
	b := startBg(t, c, req)
	return b.wait(t), b
}

// gone reports whether pid has exited (or is a zombie).
func gone(pid int) bool {
	if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
