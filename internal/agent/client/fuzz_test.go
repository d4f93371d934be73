//go:build linux

package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// The agent runs inside the sandbox as its PID 1, next to code the daemon
// does not trust: the daemon must survive whatever comes back on the
// agent's socket. These targets serve fuzzed answers on a real Unix socket
// and call the real client.

// fakeAgent answers every request with the status and body it holds.
type fakeAgent struct {
	mu     sync.Mutex
	status int
	body   []byte
}

func (a *fakeAgent) set(status int, body []byte) {
	a.mu.Lock()
	a.status, a.body = status, body
	a.mu.Unlock()
}

func (a *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	status, body := a.status, a.body
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(status)
	w.Write(body)
}

// startFakeAgent serves a on a Unix socket in a temporary directory and
// returns a client for it.
func startFakeAgent(tb testing.TB, a http.Handler) *Client {
	tb.Helper()
	sock := filepath.Join(tb.TempDir(), wire.SocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: a}
	go srv.Serve(ln)
	c := New(sock)
	tb.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	return c
}

// fuzzStatuses are the statuses a fuzzed answer may have (all that carry a
// body; a 3xx without Location comes back to the client as it is).
var fuzzStatuses = []int{200, 200, 200, 201, 299, 302, 400, 403, 404, 409, 413, 429, 500, 503, 504}

// FuzzClientAnswers calls a client method against an agent answering with
// any status and body. It checks: no panic and no hang; an error status is
// always an error, of the kind the body names (or with the status in its
// message when the body is not an agent error); a streamed answer delivers
// exactly the events before its last line, in order, and a stream that ends
// without its last line is an error, never a result.
func FuzzClientAnswers(f *testing.F) {
	for _, s := range []struct {
		call   uint8
		status uint8
		body   string
	}{
		{0, 0, `{"stream":"stdout","data":"aGkK"}` + "\n" + `{"exit":{"code":0,"duration_ms":3}}` + "\n"},
		{0, 0, `{"stream":"stdout","data":"aGkK"}` + "\n"},
		{0, 0, `{"stream":"stderr","data":"!!"}` + "\n" + `{"exit":null}` + "\n" + `{"exit":{"code":-1,"signal":"killed"}}`},
		{0, 6, `{"error":{"code":"invalid_argument","message":"cmd is required"}}`},
		{0, 12, `{"error":{"code":"no_such_code","message":"x"}}`},
		{0, 12, `<html>oops</html>`},
		{1, 0, `{"type":"stdout","text":"hi"}` + "\n" + `{"type":"done","execution":{"logs":{"stdout":["hi"],"stderr":[]},"results":[],"error":null,"execution_count":1},"context_id":"c1","pid":12}`},
		{1, 0, `{"type":"done"}`},
		{1, 0, `{"type":"failure","text":"kernel died"}`},
		{1, 0, `{"type":"result","result":{"text":"1","is_main_result":true}}{"type":"error","error":{"name":"E","value":"v","traceback":null}}`},
		{2, 0, `{"path":"/workspace/a","size":3}`},
		{2, 0, `{"path":1}`},
		{3, 0, `{"path":"/workspace","entries":[{"name":"a","path":"/workspace/a","type":"file","size":1,"mode":"-rw-r--r--","mod_time":"2025-01-02T03:04:05Z"}]}`},
		{3, 0, `{"entries":[{"mod_time":"yesterday"}]}`},
		{4, 3, `{"id":"c1","language":"python","kernel":"python3","cwd":"/workspace","default":false,"state":"new","execution_count":0,"created_at":"2025-01-02T03:04:05Z"}`},
		{5, 0, `[]`},
		{5, 0, `null`},
		{6, 0, `ok`},
		{7, 8, `{"error":{"code":"not_found","message":"no such file"}}`},
		{8, 9, `{"error":{"code":"","message":"empty code"}}`},
		{9, 0, ``},
	} {
		f.Add(s.call, s.status, []byte(s.body))
	}
	a := &fakeAgent{}
	c := startFakeAgent(f, a)
	f.Fuzz(func(t *testing.T, call, st uint8, body []byte) {
		status := fuzzStatuses[int(st)%len(fuzzStatuses)]
		a.set(status, body)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		switch call % 10 {
		case 0:
			var got []wire.ExecEvent
			var exit *wire.ExitStatus
			exit, err = c.Exec(ctx, &wire.ExecRequest{Cmd: "true"}, func(ev wire.ExecEvent) { got = append(got, ev) })
			if status < 300 {
				wantEvents, wantExit, complete := expectStream[wire.ExecEvent](body, func(ev *wire.ExecEvent) bool { return ev.Exit != nil })
				if complete != (err == nil) {
					t.Fatalf("Exec over %q: %v (a complete stream: %v)", body, err, complete)
				}
				if (len(got) > 0 || len(wantEvents) > 0) && !reflect.DeepEqual(got, wantEvents) {
					t.Fatalf("Exec over %q delivered %+v, want %+v", body, got, wantEvents)
				}
				if err == nil && !reflect.DeepEqual(exit, wantExit.Exit) {
					t.Fatalf("Exec over %q = %+v, want %+v", body, exit, wantExit.Exit)
				}
			}
		case 1:
			var got []wire.CodeEvent
			var done *CodeDone
			done, err = c.RunCode(ctx, &wire.CodeRequest{Code: "1"}, func(ev wire.CodeEvent) { got = append(got, ev) })
			if status < 300 {
				wantEvents, last, complete := expectStream[wire.CodeEvent](body, func(ev *wire.CodeEvent) bool { return ev.Type == "done" || ev.Type == "failure" })
				succeeded := complete && last.Type == "done" && last.Execution != nil
				if succeeded != (err == nil) {
					t.Fatalf("RunCode over %q: %+v, %v (want success: %v)", body, done, err, succeeded)
				}
				if (len(got) > 0 || len(wantEvents) > 0) && !reflect.DeepEqual(got, wantEvents) {
					t.Fatalf("RunCode over %q delivered %+v, want %+v", body, got, wantEvents)
				}
				if err == nil && (done == nil || !reflect.DeepEqual(done.Execution, last.Execution) || done.ContextID != last.ContextID || done.PID != last.PID) {
					t.Fatalf("RunCode over %q = %+v, want the done line %+v", body, done, last)
				}
				if complete && last.Type == "failure" && (err == nil || err.Error() != last.Text) {
					t.Fatalf("RunCode over %q: failure line %q gave %v", body, last.Text, err)
				}
			}
		case 2:
			var p string
			var n int64
			p, n, err = c.WriteFile(ctx, "/workspace/a", 0o644, strings.NewReader("abc"))
			if status < 300 {
				var want struct {
					Path string `json:"path"`
					Size int64  `json:"size"`
				}
				werr := json.NewDecoder(bytes.NewReader(body)).Decode(&want)
				if (werr == nil) != (err == nil) || (err == nil && (p != want.Path || n != want.Size)) {
					t.Fatalf("WriteFile over %q = %q, %d, %v; want %+v, %v", body, p, n, err, want, werr)
				}
			}
		case 3:
			_, _, err = c.ListFiles(ctx, "/workspace")
			if status < 300 {
				checkFirstValue(t, body, err, &struct {
					Path    string           `json:"path"`
					Entries []wire.FileEntry `json:"entries"`
				}{})
			}
		case 4:
			_, err = c.CreateContext(ctx, &wire.CreateContextRequest{Language: "python"})
			if status < 300 {
				checkFirstValue(t, body, err, &api.Context{})
			}
		case 5:
			_, err = c.ListContexts(ctx)
		case 6:
			err = c.Health(ctx)
			if status < 300 && err != nil {
				t.Fatalf("Health with a %d answer: %v", status, err)
			}
		case 7:
			err = c.RemoveFile(ctx, "/workspace/a", true)
			if status < 300 && err != nil {
				t.Fatalf("RemoveFile with a %d answer: %v", status, err)
			}
		case 8:
			_, err = c.InterruptContext(ctx, "c1")
		case 9:
			err = c.DeleteContext(ctx, "c1")
			if status < 300 && err != nil {
				t.Fatalf("DeleteContext with a %d answer: %v", status, err)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("call %d over %d %q did not end in time", call%10, status, body)
		}
		if status >= 300 {
			checkErrorAnswer(t, status, body, err)
		}
	})
}

// FuzzJupyterRecv calls JupyterRecv against an agent answering with any
// status and body: the daemon relays what it returns to a notebook and
// moves its cursor by it, so an answer it accepts has rising seqs above the
// cursor up to the head, known channels and JSON objects for parts.
func FuzzJupyterRecv(f *testing.F) {
	msg := `{"seq":%d,"channel":"iopub","header":{},"parent_header":{},"metadata":{},"content":{"text":"x"},"buffers":["AAE="]}`
	for _, s := range []struct {
		after  int64
		status uint8
		body   string
	}{
		{0, 0, `{"head":2,"dropped":0,"messages":[` + fmt.Sprintf(msg, 1) + `,` + fmt.Sprintf(msg, 2) + `]}`},
		{0, 0, `{"head":2,"dropped":0,"messages":[` + fmt.Sprintf(msg, 2) + `,` + fmt.Sprintf(msg, 1) + `]}`},
		{1, 0, `{"head":1,"dropped":0,"messages":[` + fmt.Sprintf(msg, 1) + `]}`},
		{0, 0, `{"head":1,"dropped":0,"messages":[` + fmt.Sprintf(msg, 2) + `]}`},
		{-1, 0, `{"head":5,"dropped":0,"messages":[]}`},
		{-1, 0, `{"head":5,"dropped":0,"messages":[` + fmt.Sprintf(msg, 1) + `]}`},
		{0, 0, `{"head":3,"dropped":-1,"messages":null}`},
		{0, 0, `{"head":1,"dropped":0,"messages":[{"seq":1,"channel":"hb","header":{},"parent_header":{},"metadata":{},"content":{}}]}`},
		{0, 0, `{"head":1,"dropped":0,"messages":[{"seq":1,"channel":"shell","header":5,"parent_header":{},"metadata":{},"content":{}}]}`},
		{0, 0, `{"head":1,"dropped":0,"messages":[{"seq":1,"channel":"shell","header":{}}]}`},
		{0, 0, `{"head":1,"messages":[`},
		{0, 6, `{"error":{"code":"not_found","message":"context \"x\" not found"}}`},
	} {
		f.Add(s.after, s.status, []byte(s.body))
	}
	a := &fakeAgent{}
	c := startFakeAgent(f, a)
	f.Fuzz(func(t *testing.T, after int64, st uint8, body []byte) {
		if after < -1 {
			after = -1
		}
		status := fuzzStatuses[int(st)%len(fuzzStatuses)]
		a.set(status, body)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ans, err := c.JupyterRecv(ctx, "ctx_0000abcd", "", after, 0)
		if ctx.Err() != nil {
			t.Fatalf("JupyterRecv over %d %q did not end in time", status, body)
		}
		if status >= 300 {
			checkErrorAnswer(t, status, body, err)
			return
		}
		if err != nil {
			return
		}
		if ans == nil || ans.Messages == nil || ans.Dropped < 0 || (after < 0 && len(ans.Messages) > 0) {
			t.Fatalf("JupyterRecv over %q = %+v", body, ans)
		}
		last := after
		for _, m := range ans.Messages {
			if m.Seq <= last || m.Seq > ans.Head || !json.Valid(m.Header) || !json.Valid(m.Content) {
				t.Fatalf("JupyterRecv after %d over %q accepted message %+v", after, body, m)
			}
			switch m.Channel {
			case "shell", "iopub", "control", "stdin":
			default:
				t.Fatalf("JupyterRecv over %q accepted channel %q", body, m.Channel)
			}
			last = m.Seq
		}
	})
}

// expectStream decodes an NDJSON answer as the client should: the events
// before the first line for which last is true, that line, and whether the
// stream got there.
func expectStream[T any](body []byte, last func(*T) bool) (events []T, end T, complete bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		var ev T
		if dec.Decode(&ev) != nil {
			return events, end, false
		}
		if last(&ev) {
			return events, ev, true
		}
		events = append(events, ev)
	}
}

// checkFirstValue wants err nil exactly when body starts with a JSON value
// that decodes into v.
func checkFirstValue(t *testing.T, body []byte, err error, v any) {
	t.Helper()
	werr := json.NewDecoder(bytes.NewReader(body)).Decode(v)
	if (werr == nil) != (err == nil) {
		t.Fatalf("answer %q: %v; decoding it: %v", body, err, werr)
	}
}

// checkErrorAnswer checks the error a call got for an error status: an
// agent error body gives its message and kind, anything else an error that
// names the status.
func checkErrorAnswer(t *testing.T, status int, body []byte, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("a %d answer %q gave no error", status, body)
	}
	var eb wire.ErrorBody
	if len(body) <= 64<<10 && json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		if err.Error() != eb.Error.Message {
			t.Fatalf("agent error %q came back as %q", body, err)
		}
		if kind := errdefs.FromCode(eb.Error.Code); kind != nil && !errors.Is(err, kind) {
			t.Fatalf("agent error %q lost its kind: %v", body, err)
		}
		return
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("HTTP %d", status)) {
		t.Fatalf("a %d answer %q gave %q, which does not name the status", status, body, err)
	}
}
