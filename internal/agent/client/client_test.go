//go:build linux

package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// The agent's own tests (internal/agent/server) drive the real agent
// through this client; these check what the client sends and how it reads
// the answers, against a recording agent.

// recorder answers each request with the answer for its path and keeps
// the request.
type recorder struct {
	mu      sync.Mutex
	method  string
	uri     string
	body    string
	answers map[string]string // path → body, 200 (NDJSON or JSON)
}

func (a *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.method, a.uri, a.body = r.Method, r.URL.RequestURI(), string(b)
	ans := a.answers[r.URL.Path]
	a.mu.Unlock()
	if ans == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Write([]byte(ans))
}

func (a *recorder) last() (method, uri, body string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.method, a.uri, a.body
}

func TestClientRequests(t *testing.T) {
	msg := `{"seq":1,"channel":"iopub","header":{},"parent_header":{},"metadata":{},"content":{}}`
	a := &recorder{answers: map[string]string{
		"/self":                               `{"dumpable":0,"cap_eff":"00000000000000e0","cap_prm":"00000000000000e0","want_eff":"00000000000000e0","want_prm":"00000000000000e0","groups":[],"no_new_privs":1}`,
		"/files":                              "file body",
		"/watch":                              `{"started":true}` + "\n" + `{"name":"a","op":"create"}` + "\n",
		"/contexts/ctx_0000abcd/restart":      `{"id":"ctx_0000abcd","state":"idle"}`,
		"/contexts/ctx_0000abcd/jupyter/recv": `{"head":1,"dropped":0,"messages":[` + msg + `]}`,
	}}
	c := startFakeAgent(t, a)
	ctx := context.Background()
	want := func(what, method, uri, body string) {
		t.Helper()
		m, u, b := a.last()
		if m != method || u != uri || (body != "" && strings.TrimSpace(b) != body) {
			t.Errorf("%s sent %s %s %q; want %s %s %q", what, m, u, b, method, uri, body)
		}
	}

	rep, err := c.Self(ctx)
	if err != nil || rep.Dumpable != 0 || rep.CapEff != "00000000000000e0" || rep.NoNewPrivs != 1 || rep.Groups == nil {
		t.Errorf("Self: %+v, %v", rep, err)
	}
	want("Self", "GET", "/self", "")

	rc, size, err := c.ReadFile(ctx, "/work space/a&b")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "file body" || size != int64(len(b)) {
		t.Errorf("ReadFile: %q, size %d", b, size)
	}
	want("ReadFile", "GET", "/files?path=%2Fwork+space%2Fa%26b", "")

	if err := c.ExecInput(ctx, "id-1", []byte("hi"), true); err != nil {
		t.Fatal(err)
	}
	want("ExecInput", "POST", "/exec/input", `{"id":"id-1","data":"aGk=","close":true}`)
	if err := c.ExecSignal(ctx, "id-1", "SIGINT"); err != nil {
		t.Fatal(err)
	}
	want("ExecSignal", "POST", "/exec/signal", `{"id":"id-1","signal":"SIGINT"}`)
	if err := c.ExecResize(ctx, "id-1", wire.PTYSize{Cols: 120, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	want("ExecResize", "POST", "/exec/resize", `{"id":"id-1","cols":120,"rows":40}`)
	if err := c.Prestart(ctx, "python"); err != nil {
		t.Fatal(err)
	}
	want("Prestart", "POST", "/contexts/prestart", `{"language":"python"}`)
	cx, err := c.RestartContext(ctx, "ctx_0000abcd")
	if err != nil || cx.ID != "ctx_0000abcd" || cx.State != "idle" {
		t.Errorf("RestartContext: %+v, %v", cx, err)
	}
	want("RestartContext", "POST", "/contexts/ctx_0000abcd/restart", "")
	m := &wire.JupyterMessage{Channel: "shell", Header: json.RawMessage(`{"msg_id":"<&>"}`), Content: json.RawMessage(`{}`)}
	if err := c.JupyterSend(ctx, "ctx_0000abcd", "python", m); err != nil {
		t.Fatal(err)
	}
	// The client's bytes as they are: no HTML escaping.
	want("JupyterSend", "POST", "/contexts/ctx_0000abcd/jupyter/send?language=python",
		`{"channel":"shell","header":{"msg_id":"<&>"},"parent_header":null,"metadata":null,"content":{}}`)
	ans, err := c.JupyterRecv(ctx, "ctx_0000abcd", "python", 0, 2*time.Second)
	if err != nil || ans.Head != 1 || len(ans.Messages) != 1 {
		t.Errorf("JupyterRecv: %+v, %v", ans, err)
	}
	want("JupyterRecv", "GET", "/contexts/ctx_0000abcd/jupyter/recv?after=0&language=python&wait_ms=2000", "")

	// A watch delivers its events until the caller ends it; a stream that
	// the agent ends is an error.
	var mu sync.Mutex
	var events []wire.WatchEvent
	err = c.Watch(ctx, "/w", true, func(ev wire.WatchEvent) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	})
	if err == nil || len(events) != 2 || !events[0].Started || events[1].Name != "a" || events[1].Op != "create" {
		t.Errorf("Watch: %+v, %v", events, err)
	}
	want("Watch", "POST", "/watch", `{"path":"/w","recursive":true}`)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Watch(cctx, "/w", false, func(wire.WatchEvent) {}); err != nil {
		t.Errorf("a watch its caller ended: %v", err)
	}

	// Refused before anything is sent.
	a.mu.Lock()
	a.method = ""
	a.mu.Unlock()
	for what, err := range map[string]error{
		"oversize input":        c.ExecInput(ctx, "id-1", make([]byte, wire.MaxExecInput+1), false),
		"a size of 0x24":        c.ExecResize(ctx, "id-1", wire.PTYSize{Cols: 0, Rows: 24}),
		"no context to end":     c.DeleteContext(ctx, ""),
		"no context to send to": c.JupyterSend(ctx, "", "", &wire.JupyterMessage{Channel: "shell"}),
		"no context to receive from": func() error {
			_, err := c.JupyterRecv(ctx, "", "", 0, 0)
			return err
		}(),
	} {
		if !errors.Is(err, errdefs.ErrTooLarge) && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v", what, err)
		}
	}
	if m, _, _ := a.last(); m != "" {
		t.Errorf("a refused call sent a %s", m)
	}
}

// TestClientSocket: the client connects only to a socket at the name it
// was given, never through a symlink, and says why it cannot.
func TestClientSocket(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.sock")
	ln, err := net.Listen("unix", real)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	link := filepath.Join(dir, "link.sock")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file.sock")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for sock, says := range map[string]string{
		real:                                   "",
		link:                                   "is not a socket (mode 0120000)", // the link itself, not followed
		file:                                   "is not a socket",
		filepath.Join(dir, "missing.sock"):     "no such file",
		filepath.Join(dir, "no-dir", "a.sock"): "no such file",
	} {
		c := New(sock)
		err := c.Health(ctx)
		c.Close()
		if says == "" && err != nil || says != "" && (err == nil || !strings.Contains(err.Error(), says)) {
			t.Errorf("%s: %v; want %q", filepath.Base(sock), err, says)
		}
	}
}

// A client closed while calls are dialing (a sandbox terminated under a
// call) fails those calls; it never dials through a closed descriptor.
// Run with -race.
func TestCloseWhileDialing(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	for range 20 {
		c := New(sock)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := c.Health(ctx); err != nil && !strings.Contains(err.Error(), "closed") {
					t.Errorf("a call racing Close: %v", err)
				}
			}()
		}
		c.Close()
		wg.Wait()
		if err := c.Health(context.Background()); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("a call after Close: %v; want it refused as closed", err)
		}
	}
}
