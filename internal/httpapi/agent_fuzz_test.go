//go:build linux

package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/sandbox/sandboxtest"
	sseread "github.com/forkbox/forkbox/internal/sse" // httpapi has its own sse, the writer
	"github.com/forkbox/forkbox/internal/store"
)

// hostileAgent stands in for a sandbox's agent: it answers every call with
// the status and body it holds.
type hostileAgent struct {
	mu     sync.Mutex
	status int
	body   []byte
}

func (a *hostileAgent) set(status int, body []byte) {
	a.mu.Lock()
	a.status, a.body = status, body
	a.mu.Unlock()
}

func (a *hostileAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	a.mu.Lock()
	status, body := a.status, a.body
	a.mu.Unlock()
	w.WriteHeader(status)
	w.Write(body)
}

// agentRuntime "creates" every sandbox as the one whose agent listens in
// dir/run.
type agentRuntime struct {
	sandboxtest.NoRuntime
	dir string
}

func (r agentRuntime) Create(context.Context, runtime.Spec) (*runtime.Info, error) {
	return &runtime.Info{Dir: r.dir}, nil
}

type anyImage struct{}

func (anyImage) Get(_ context.Context, name string) (*image.Image, error) {
	return &image.Image{Name: name, ID: "sha256:" + name, WorkDir: "/workspace", UID: 1000, GID: 1000}, nil
}

// agentCalls are the API calls FuzzHostileAgent makes, each answered by
// the hostile agent.
var agentCalls = []struct {
	method, path, body string
	last               []string // the events that end its SSE stream
}{
	{http.MethodPost, "/exec", `{"cmd":"true"}`, []string{api.EventExit, api.EventError}},
	{http.MethodPost, "/code", `{"code":"1"}`, []string{api.EventDone, api.EventFailure}},
	{http.MethodPut, "/files?path=a.txt", "content", nil},
	{http.MethodGet, "/files/list?path=/workspace", "", nil},
	{http.MethodGet, "/files?path=a.txt", "", nil},
	{http.MethodPost, "/contexts", `{}`, nil},
	{http.MethodGet, "/contexts", "", nil},
	{http.MethodDelete, "/files?path=a.txt&recursive=true", "", nil},
	{http.MethodPost, "/contexts/ctx_1/interrupt", "", nil},
}

// FuzzHostileAgent makes API calls to a live sandbox whose agent answers
// with any status and body. A sandbox's agent shares the sandbox with code
// the daemon does not trust, so the daemon must not panic, hang or give a
// malformed answer whatever it says, and the sandbox must stay usable: the
// next call, answered well, succeeds.
func FuzzHostileAgent(f *testing.F) {
	for _, s := range []struct {
		call, status uint8
		sse          bool
		body         string
	}{
		{0, 0, false, `{"stream":"stdout","data":"aGkK"}` + "\n" + `{"exit":{"code":0,"duration_ms":1}}`},
		{0, 0, true, `{"stream":"stdout","data":"/w=="}` + "\n" + `{"stream":"stderr","data":"4pw="}` + "\n" + `{"exit":{"code":-1,"signal":"SIGKILL"}}`},
		{0, 0, true, `{"stream":"stdout","data":"aGkK"}`},
		{0, 6, false, `{"error":{"code":"unauthenticated","message":"forged"}}`},
		{1, 0, true, `{"type":"stdout","text":"hi"}` + "\n" + `{"type":"result","result":{"text":"1"}}` + "\n" + `{"type":"done","execution":{"logs":{"stdout":["hi"],"stderr":[]},"results":[{"text":"1","is_main_result":true}],"error":null,"execution_count":1}}`},
		{1, 0, false, `{"type":"done","execution":{"results":null,"logs":{"stdout":null}}}`},
		{1, 0, true, `{"type":"failure","text":""}`},
		{1, 0, false, `{"type":"error","error":null}` + "\n" + `{"type":"done"}`},
		{2, 0, false, `{"path":"/workspace/a.txt","size":-1}`},
		{3, 0, false, `{"path":"/workspace","entries":null}`},
		{4, 0, false, "file content \xff"},
		{5, 0, false, `{"id":"ctx_1"}`},
		{6, 0, false, `null`},
		{7, 12, false, `not json`},
		{8, 9, false, `{"error":{"code":"not_found","message":"no context"}}`},
	} {
		f.Add(s.call, s.status, s.sse, []byte(s.body))
	}
	dir := f.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o700); err != nil {
		f.Fatal(err)
	}
	ln, err := net.Listen("unix", runtime.SocketPath(&runtime.Info{Dir: dir}))
	if err != nil {
		f.Fatal(err)
	}
	a := &hostileAgent{}
	srv := &http.Server{Handler: a}
	go srv.Serve(ln)
	f.Cleanup(func() { srv.Close() })

	st, err := store.OpenSQLite(context.Background(), filepath.Join(dir, "forkbox.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mgr := sandbox.New(st, agentRuntime{dir: dir}, anyImage{}, nil, sandbox.DefaultDefaults, quiet)
	s, err := New(Config{Logger: quiet, MaxUploadBytes: 1 << 20}, mgr)
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	do := func(ctx context.Context, method, path, body string, sse bool) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
		if sse {
			r.Header.Set("Accept", "text/event-stream")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := do(context.Background(), http.MethodPost, "/v1/sandboxes", `{"name":"target"}`, false)
	var sb api.Sandbox
	if w.Code != http.StatusCreated || json.Unmarshal(w.Body.Bytes(), &sb) != nil {
		f.Fatalf("create: %d %s", w.Code, w.Body.Bytes())
	}
	base := "/v1/sandboxes/" + sb.ID

	f.Fuzz(func(t *testing.T, call, st uint8, sse bool, body []byte) {
		c := agentCalls[int(call)%len(agentCalls)]
		status := []int{200, 200, 200, 201, 204, 302, 400, 401, 404, 409, 413, 429, 500, 503}[int(st)%14]
		a.set(status, body)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w := do(ctx, c.method, base+c.path, c.body, sse)
		if ctx.Err() != nil {
			t.Fatalf("%s %s with the agent answering %d %q did not end in time", c.method, c.path, status, body)
		}
		checkAgentAnswer(t, w, c.last, status, body)

		// The sandbox is not wedged: a well-answered exec goes through.
		a.set(http.StatusOK, []byte(`{"exit":{"code":7,"duration_ms":1}}`))
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		w = do(ctx2, http.MethodPost, base+"/exec", `{"cmd":"true"}`, false)
		var res api.ExecResult
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &res) != nil || res.ExitCode != 7 {
			t.Fatalf("after %s %s answered %d %q, the next exec got %d %s", c.method, c.path, status, body, w.Code, w.Body.Bytes())
		}
	})
}

// checkAgentAnswer checks that an API answer is well formed: an SSE stream of
// events with JSON data that ends with one of last, a JSON document, an
// empty 204, or a file's bytes.
func checkAgentAnswer(t *testing.T, w *httptest.ResponseRecorder, last []string, status int, agentBody []byte) {
	t.Helper()
	ct := w.Header().Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		if w.Code != http.StatusOK {
			t.Fatalf("an event stream with status %d", w.Code)
		}
		evs, err := sseread.ReadAll(bytes.NewReader(w.Body.Bytes()))
		if err != nil {
			t.Fatalf("reading the event stream: %v (agent answered %d %q)", err, status, agentBody)
		}
		var events []string
		for _, ev := range evs {
			if !json.Valid(ev.Data) {
				t.Fatalf("event %s data %q is not JSON (agent answered %d %q)", ev.Name, ev.Data, status, agentBody)
			}
			events = append(events, ev.Name)
		}
		if len(events) == 0 || (len(last) > 0 && !slices.Contains(last, events[len(events)-1])) {
			t.Fatalf("event stream %v does not end with one of %v (agent answered %d %q):\n%s", events, last, status, agentBody, w.Body.Bytes())
		}
		for _, ev := range events[:len(events)-1] {
			if slices.Contains(last, ev) {
				t.Fatalf("event stream %v has an end event before its end", events)
			}
		}
	case w.Code == http.StatusNoContent:
		if w.Body.Len() != 0 {
			t.Fatalf("204 with a body %q", w.Body.Bytes())
		}
	case strings.HasPrefix(ct, "application/json"):
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%d answer %q is not JSON (agent answered %d %q)", w.Code, w.Body.Bytes(), status, agentBody)
		}
		if w.Code >= 400 {
			var e api.Error
			if json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("%d answer %q is not an API error (agent answered %d %q)", w.Code, w.Body.Bytes(), status, agentBody)
			}
		}
	case ct == "application/octet-stream" && w.Code == http.StatusOK:
	default:
		t.Fatalf("%d answer of type %q: %q (agent answered %d %q)", w.Code, ct, w.Body.Bytes(), status, agentBody)
	}
}
