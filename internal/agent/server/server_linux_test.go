package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// procStatus returns a field of the test process's /proc/self/status.
func procStatus(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	return statusField(string(b), name)
}

// TestSelfReport: GET /self says how the agent's process stands: what
// /proc says of it, and the capability sets it means to hold once it
// serves.
func TestSelfReport(t *testing.T) {
	s, _ := testServer(t)
	want := wantedCaps(false)
	s.caps = &want // only Self is asked: no thread switches to the user here
	c := serveTestAgent(t, s)
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Self(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dumpable, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	groups, _ := syscall.Getgroups()
	if rep.Dumpable != dumpable || fmt.Sprint(rep.NoNewPrivs) != procStatus(t, "NoNewPrivs") ||
		rep.CapEff != procStatus(t, "CapEff") || rep.CapPrm != procStatus(t, "CapPrm") ||
		rep.Groups == nil || fmt.Sprint(rep.Groups) != fmt.Sprint(append([]int{}, groups...)) {
		t.Errorf("self report %+v; /proc says dumpable %d, no_new_privs %s, eff %s, prm %s, groups %v",
			rep, dumpable, procStatus(t, "NoNewPrivs"), procStatus(t, "CapEff"), procStatus(t, "CapPrm"), groups)
	}
	if rep.WantEff != "00000000000000e0" || rep.WantPrm != "00000000000000e0" {
		t.Errorf("wanted sets %s and %s", rep.WantEff, rep.WantPrm)
	}
}

// TestErrorKinds: each error kind the agent answers with reaches the
// daemon's client as that kind, with its message and status; anything
// else is internal.
func TestErrorKinds(t *testing.T) {
	var mu sync.Mutex
	var current error
	a := serveHTTP(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		writeError(w, current)
	})})
	ctx := context.Background()
	for _, e := range []error{
		errdefs.InvalidArgument("bad %d", 1), errdefs.Unauthenticated("who"), errdefs.PermissionDenied("no"),
		errdefs.NotFound("gone"), errdefs.Conflict("taken"), errdefs.FailedPrecondition("not now"), errdefs.Busy("busy"),
		errdefs.TooLarge("big"), errdefs.ResourceExhausted("full"), errdefs.InsufficientStorage("no room"),
		errdefs.Timeout("late"), errdefs.Unavailable("off"), fmt.Errorf("wrapped: %w", errdefs.NotFound("deep")),
		errors.New("plain"),
	} {
		mu.Lock()
		current = e
		mu.Unlock()
		status, _ := errdefs.HTTPStatus(e)
		err := a.Health(ctx)
		if err == nil || err.Error() != e.Error() {
			t.Errorf("%v: the client says %v", e, err)
			continue
		}
		for _, kind := range []error{errdefs.ErrInvalidArgument, errdefs.ErrUnauthenticated, errdefs.ErrPermissionDenied, errdefs.ErrNotFound,
			errdefs.ErrConflict, errdefs.ErrFailedPrecondition, errdefs.ErrBusy, errdefs.ErrTooLarge, errdefs.ErrResourceExhausted,
			errdefs.ErrInsufficientStorage, errdefs.ErrTimeout, errdefs.ErrUnavailable} {
			if errors.Is(err, kind) != errors.Is(e, kind) {
				t.Errorf("%v: the client's error %v is %v: %v", e, err, kind, errors.Is(err, kind))
			}
		}
		resp, rerr := a.raw.Get("http://agent/healthz")
		if rerr != nil {
			t.Fatal(rerr)
		}
		resp.Body.Close()
		if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%v: HTTP %d %s, want %d", e, resp.StatusCode, resp.Header.Get("Content-Type"), status)
		}
	}
}

// TestHostileRequests: malformed and oversized requests are refused, a
// client that holds half a request holds only its own connection, and the
// agent serves on after each.
func TestHostileRequests(t *testing.T) {
	c, _ := startAgent(t)
	ctx := context.Background()
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/exec", `{"cmd": 1}`},
		{"POST", "/exec", `not json`},
		{"POST", "/exec/input", `{"id": "x", "data": "not base64!"}`},
		{"POST", "/exec/signal", `{`},
		{"POST", "/exec/signal", `{"id":"x","signal":"` + strings.Repeat("S", 8192) + `"}`},
		{"POST", "/exec/resize", `{"id": "x", "cols": -1}`},
		{"POST", "/watch", `{"path": ["/"]}`},
		{"POST", "/code", `{"code": "1", "env": ["A=1"]}`},
		{"POST", "/contexts", `{"env": "A=1"}`},
		{"POST", "/contexts/default/jupyter/send", `{"channel": "shell", "buffers": ["%%%"]}`},
		{"GET", "/files?path=%00", ``},
		{"GET", "/contexts/default/jupyter/recv?after=99999999999999999999", ``},
	} {
		err := c.send(ctx, r.method, r.path, r.body)
		wantKind(t, r.method+" "+r.path+" "+r.body[:min(len(r.body), 40)], err, errdefs.ErrInvalidArgument)
	}
	// A Jupyter message larger than the agent takes: refused once read
	// that far, without the whole of it held.
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://agent/contexts/default/jupyter/send",
		io.MultiReader(strings.NewReader(`{"channel":"shell","content":{"x":"`), &zeros{n: maxJupyterSend}, strings.NewReader(`"}}`)))
	resp, err := c.raw.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("an oversized Jupyter message: HTTP %d", resp.StatusCode)
	}

	// Headers beyond the server's limit.
	conn, err := net.Dial("unix", c.sock)
	if err != nil {
		t.Fatal(err)
	}
	go fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: agent\r\nX-Big: %s\r\n\r\n", strings.Repeat("x", 2<<20))
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("huge headers: %v, %v", resp, err)
	}
	conn.Close()

	// Clients that send half a request and wait.
	for range 50 {
		conn, err := net.Dial("unix", c.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /exec HTTP/1.1\r\nHost: agent\r\nContent-Length: 100\r\n\r\n{\"cmd\":")
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Health(hctx); err != nil {
		t.Errorf("the agent after hostile requests: %v", err)
	}
	if _, err := readAll(t, c, "/nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a file call after hostile requests: %v", err)
	}
}

// zeros reads n '0' bytes.
type zeros struct{ n int }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n == 0 {
		return 0, io.EOF
	}
	n := min(len(p), z.n)
	for i := range p[:n] {
		p[i] = '0'
	}
	z.n -= n
	return n, nil
}

// TestAsIdentity: work as the user runs on a thread that switched; one
// that cannot switch runs nothing, and a panic there is an error, not the
// agent's end.
func TestAsIdentity(t *testing.T) {
	s, _ := testServer(t)
	var fsuid int
	if err := s.asUser(func() error {
		fsuid, _ = unix.SetfsuidRetUid(-1)
		return nil
	}); err != nil || fsuid != s.cfg.UID {
		t.Errorf("asUser ran with fsuid %d, %v; want %d", fsuid, err, s.cfg.UID)
	}
	if err := s.asUser(func() error { panic("boom") }); err == nil || !strings.Contains(err.Error(), "internal error: boom") {
		t.Errorf("a panic as the user: %v", err)
	}
	if os.Geteuid() != 0 {
		ran := false
		err := s.asIdentity(os.Getuid()+1, os.Getgid(), func() error { ran = true; return nil })
		if err == nil || ran {
			t.Errorf("as another user without root: ran %v, %v", ran, err)
		}
	}
	// Once the agent serves, a thread given back has the agent's sets.
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		got, err := threadCaps()
		if err == nil && !restoreThreadCaps(got) {
			err = errors.New("restoring the sets the thread has failed")
		}
		if os.Geteuid() == 0 && err == nil {
			want := wantedCaps(false)
			if !restoreThreadCaps(want) {
				err = errors.New("restoring the agent's sets failed")
			} else if now, _ := threadCaps(); now != want {
				err = fmt.Errorf("thread sets eff %s prm %s", capHex(now.eff), capHex(now.prm))
			}
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// TestAppendFileLog: the agent's log is appended to, made private, and
// never written through a symlink planted in its place.
func TestAppendFileLog(t *testing.T) {
	dir := t.TempDir()
	log := appendFile(filepath.Join(dir, "agent.log"))
	for _, line := range []string{"one\n", "two\n"} {
		if _, err := log.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat(string(log)); err != nil || st.Mode() != 0o600 {
		t.Errorf("log: %v, %v", st.Mode(), err)
	}
	if b, _ := os.ReadFile(string(log)); string(b) != "one\ntwo\n" {
		t.Errorf("log holds %q", b)
	}
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("victim"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := appendFile(filepath.Join(dir, "link.log"))
	if err := os.Symlink(victim, string(link)); err != nil {
		t.Fatal(err)
	}
	if _, err := link.Write([]byte("x")); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("a write through a symlink: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "victim" {
		t.Errorf("the victim holds %q", b)
	}
}
