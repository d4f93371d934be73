package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// sampleExecution has the shape of docs/API.md's example execution: output on
// both streams, a figure and the main result.
func sampleExecution() api.Execution {
	return api.Execution{
		Logs: api.Logs{Stdout: []string{"hi\n"}, Stderr: []string{"warn\n"}},
		Results: []map[string]any{
			{"png": "iVBORw0KGgo=", "text": "<Figure size 640x480 with 1 Axes>"},
			{"text": "215", "is_main_result": true},
		},
		ExecutionCount: 2,
		ContextID:      "ctx_1",
		DurationMS:     31,
	}
}

func TestRunCode(t *testing.T) {
	var raw map[string]any
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/sandboxes/box/code" {
			writeErr(w, errdefs.NotFound("no route %s %s", r.Method, r.URL.Path))
			return
		}
		if r.Header.Get("Accept") != "application/json" {
			t.Errorf("Accept = %q", r.Header.Get("Accept"))
		}
		json.NewDecoder(r.Body).Decode(&raw)
		writeJSON(w, 200, sampleExecution())
	})
	exec, err := c.RunCode(context.Background(), "box", api.RunCodeRequest{
		Code: "sum(sales)", Context: "default", TimeoutMS: ptr(int64(5000)), Env: map[string]string{"A": "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(raw); string(got) != `{"code":"sum(sales)","context":"default","env":{"A":"1"},"timeout_ms":5000}` {
		t.Errorf("sent %s", got)
	}
	if want := sampleExecution(); !reflect.DeepEqual(*exec, want) {
		t.Errorf("exec = %+v\nwant %+v", *exec, want)
	}
	if MainText(exec) != "215" {
		t.Errorf("MainText = %q", MainText(exec))
	}
}

func TestRunCodeCellError(t *testing.T) {
	// A cell that raises is a 200 with the error in the execution.
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"logs":{"stdout":[],"stderr":[]},"results":[],"error":{"name":"NameError","value":"name 'x' is not defined","traceback":["Traceback…","NameError: name 'x' is not defined"]},"execution_count":3,"duration_ms":4}`)
	})
	exec, err := c.RunCode(context.Background(), "box", api.RunCodeRequest{Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if exec.Error == nil || exec.Error.Name != "NameError" || len(exec.Error.Traceback) != 2 || exec.ExecutionCount != 3 {
		t.Errorf("exec = %+v", exec)
	}
	if MainText(exec) != "" {
		t.Errorf("MainText = %q", MainText(exec))
	}
}

func TestMainText(t *testing.T) {
	for _, c := range []struct {
		exec *api.Execution
		want string
	}{
		{nil, ""},
		{&api.Execution{}, ""},
		{&api.Execution{Results: []map[string]any{{"text": "display"}}}, ""},
		{&api.Execution{Results: []map[string]any{{"html": "<b>x</b>", "is_main_result": true}}}, ""},
		{&api.Execution{Results: []map[string]any{{"text": "a"}, {"text": "b", "is_main_result": true}}}, "b"},
	} {
		if got := MainText(c.exec); got != c.want {
			t.Errorf("MainText(%+v) = %q, want %q", c.exec, got, c.want)
		}
	}
}

// recorder collects a stream's events in arrival order. The client calls the
// handlers on the caller's goroutine, so it needs no lock (-race checks that).
type recorder struct{ got []string }

func (r *recorder) add(s string) { r.got = append(r.got, s) }

func (r *recorder) handlers() CodeHandlers {
	return CodeHandlers{
		OnStdout: func(s string) { r.add("out:" + s) },
		OnStderr: func(s string) { r.add("err:" + s) },
		OnResult: func(m map[string]any) { b, _ := json.Marshal(m); r.add("result:" + string(b)) },
		OnError:  func(e api.ExecutionError) { r.add("error:" + e.Name + ": " + e.Value) },
	}
}

func TestRunCodeStream(t *testing.T) {
	exec := sampleExecution()
	exec.Error = &api.ExecutionError{Name: "ValueError", Value: "late", Traceback: []string{"tb"}}
	var stream strings.Builder
	stream.WriteString(": connected\n\n")
	stream.WriteString(sseEventText("stdout", api.OutputChunk{Data: "hi\n"}))
	stream.WriteString(sseEventText("result", exec.Results[0]))
	stream.WriteString("event: stderr\r\ndata: {\"data\":\r\ndata: \"warn ü\\n\"}\r\n\r\n") // multi-line data, CRLF
	stream.WriteString(sseEventText("progress", map[string]int{"x": 1}))                    // unknown: skipped
	stream.WriteString(sseEventText("result", exec.Results[1]))
	stream.WriteString(sseEventText("stdout", api.OutputChunk{Data: ""})) // empty: not delivered
	stream.WriteString(sseEventText("error", exec.Error))
	stream.WriteString(sseEventText("done", exec))

	for _, chunk := range []int{1, 3, 7, 1 << 20} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			c := sseServer(t, stream.String(), chunk)
			var rec recorder
			got, err := c.RunCodeStream(context.Background(), "box", api.RunCodeRequest{Code: "x"}, rec.handlers())
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				"out:hi\n",
				`result:{"png":"iVBORw0KGgo=","text":"\u003cFigure size 640x480 with 1 Axes\u003e"}`,
				"err:warn ü\n",
				`result:{"is_main_result":true,"text":"215"}`,
				"error:ValueError: late",
			}
			if !reflect.DeepEqual(rec.got, want) {
				t.Errorf("events:\n%q\nwant\n%q", rec.got, want)
			}
			if !reflect.DeepEqual(*got, exec) {
				t.Errorf("exec = %+v\nwant %+v", *got, exec)
			}
			if MainText(got) != "215" {
				t.Errorf("MainText = %q", MainText(got))
			}
		})
	}
}

func TestRunCodeStreamNilHandlers(t *testing.T) {
	exec := sampleExecution()
	c := sseServer(t, sseEventText("stdout", api.OutputChunk{Data: "x"})+sseEventText("result", exec.Results[1])+
		sseEventText("error", api.ExecutionError{Name: "E"})+sseEventText("done", exec), 1<<20)
	got, err := c.RunCodeStream(context.Background(), "box", api.RunCodeRequest{Code: "x"}, CodeHandlers{})
	if err != nil || got.ExecutionCount != 2 {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestRunCodeStreamErrors(t *testing.T) {
	out := sseEventText("stdout", api.OutputChunk{Data: "partial"})
	t.Run("failure event", func(t *testing.T) {
		c := sseServer(t, out+sseEventText("failure", api.ErrorBody{Code: "unavailable", Message: "sandbox agent went away"}), 5)
		var rec recorder
		_, err := c.RunCodeStream(context.Background(), "box", api.RunCodeRequest{Code: "x"}, rec.handlers())
		var ae *APIError
		if !errors.Is(err, errdefs.ErrUnavailable) || !errors.As(err, &ae) || ae.Status != 503 || ae.Message != "sandbox agent went away" {
			t.Fatalf("err = %#v", err)
		}
		if !reflect.DeepEqual(rec.got, []string{"out:partial"}) {
			t.Errorf("events = %q", rec.got)
		}
	})
	t.Run("failure event without a body", func(t *testing.T) {
		c := sseServer(t, "event: failure\ndata: boom\n\n", 5)
		_, err := c.RunCodeStream(context.Background(), "box", api.RunCodeRequest{Code: "x"}, CodeHandlers{})
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != "internal" || ae.Message != "boom" {
			t.Fatalf("err = %#v", err)
		}
	})
	t.Run("cell error is not a call error", func(t *testing.T) {
		exec := api.Execution{Error: &api.ExecutionError{Name: "TimeoutError", Value: "cell exceeded 100ms"}, ExecutionCount: 1}
		c := sseServer(t, sseEventText("error", exec.Error)+sseEventText("done", exec), 5)
		got, err := c.RunCodeStream(context.Background(), "box", api.RunCodeRequest{Code: "x"}, CodeHandlers{})
		if err != nil || got.Error == nil || got.Error.Name != "TimeoutError" {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
	t.Run("cut before done", func(t *testing.T) {
		c := sseServer(t, out+"event: done\ndata: {\"execution_count\":1}\n", 5) // no blank line: never dispatched
		_, err := c.RunCodeStream(context.Background(), "box", api.RunCodeRequest{Code: "x"}, CodeHandlers{})
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v, want ErrUnexpectedEOF", err)
		}
	})
	for _, ev := range []string{"stdout", "result", "error", "done"} {
		t.Run("bad "+ev+" json", func(t *testing.T) {
			c := sseServer(t, "event: "+ev+"\ndata: {nope\n\n", 5)
			_, err := c.RunCodeStream(context.Background(), "box", api.RunCodeRequest{Code: "x"}, CodeHandlers{})
			if err == nil || !strings.Contains(err.Error(), ev+" event") {
				t.Fatalf("err = %v", err)
			}
		})
	}
	t.Run("http error before stream", func(t *testing.T) {
		_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			writeErr(w, errdefs.InvalidArgument("timeout_ms: must be between 1 and 86400000"))
		})
		_, err := c.RunCodeStream(context.Background(), "box", api.RunCodeRequest{Code: "x"}, CodeHandlers{})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || err.Error() != "timeout_ms: must be between 1 and 86400000" {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestRunCodeStreamJSONFallback(t *testing.T) {
	exec := sampleExecution()
	exec.Error = &api.ExecutionError{Name: "E", Value: "v"}
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, exec) })
	var rec recorder
	got, err := c.RunCodeStream(context.Background(), "box", api.RunCodeRequest{Code: "x"}, rec.handlers())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"out:hi\n", "err:warn\n",
		`result:{"png":"iVBORw0KGgo=","text":"\u003cFigure size 640x480 with 1 Axes\u003e"}`,
		`result:{"is_main_result":true,"text":"215"}`,
		"error:E: v",
	}
	if !reflect.DeepEqual(rec.got, want) {
		t.Errorf("events:\n%q\nwant\n%q", rec.got, want)
	}
	if !reflect.DeepEqual(*got, exec) {
		t.Errorf("exec = %+v", got)
	}
}

func TestRunCodeStreamCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseEventText("stdout", api.OutputChunk{Data: "tick"}))
		w.(http.Flusher).Flush()
		select { // a cell that never ends
		case <-r.Context().Done():
		case <-release:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.RunCodeStream(ctx, "box", api.RunCodeRequest{Code: "while True: pass"},
			CodeHandlers{OnStdout: func(string) { cancel() }})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunCodeStream did not return after cancel")
	}
}

func TestContextCalls(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ctxObj := api.Context{ID: "ctx 1", Language: "python", Kernel: "python3", Cwd: "/workspace", State: "idle", CreatedAt: created}
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, strings.TrimSpace(r.Method+" "+r.URL.EscapedPath()+" "+string(body)))
		mu.Unlock()
		switch r.Method + " " + r.URL.EscapedPath() {
		case "POST /v1/sandboxes/my%20box/contexts":
			writeJSON(w, 201, ctxObj)
		case "GET /v1/sandboxes/my%20box/contexts":
			writeJSON(w, 200, api.ContextList{Contexts: []api.Context{ctxObj}})
		case "DELETE /v1/sandboxes/my%20box/contexts/ctx%201":
			w.WriteHeader(204)
		case "POST /v1/sandboxes/my%20box/contexts/ctx%201/interrupt":
			writeJSON(w, 200, ctxObj)
		case "POST /v1/sandboxes/my%20box/contexts/ctx%201/restart":
			c := ctxObj
			c.State = "new"
			writeJSON(w, 200, c)
		default:
			writeErr(w, errdefs.NotFound("context %q not found", r.PathValue("id")))
		}
	})
	ctx := context.Background()

	got, err := c.CreateContext(ctx, "my box", api.CreateContextRequest{Language: "python", Cwd: "/tmp", Env: map[string]string{"A": "1"}})
	if err != nil || !reflect.DeepEqual(*got, ctxObj) {
		t.Fatalf("create: %+v, %v", got, err)
	}
	list, err := c.ListContexts(ctx, "my box")
	if err != nil || len(list.Contexts) != 1 || list.Contexts[0].ID != "ctx 1" || !list.Contexts[0].CreatedAt.Equal(created) {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if got, err := c.InterruptContext(ctx, "my box", "ctx 1"); err != nil || got.State != "idle" {
		t.Fatalf("interrupt: %+v, %v", got, err)
	}
	if got, err := c.RestartContext(ctx, "my box", "ctx 1"); err != nil || got.State != "new" {
		t.Fatalf("restart: %+v, %v", got, err)
	}
	if err := c.DeleteContext(ctx, "my box", "ctx 1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := c.DeleteContext(ctx, "my box", "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
	for name, call := range map[string]func() error{
		"delete":    func() error { return c.DeleteContext(ctx, "my box", "") },
		"interrupt": func() error { _, err := c.InterruptContext(ctx, "my box", ""); return err },
		"restart":   func() error { _, err := c.RestartContext(ctx, "my box", ""); return err },
	} {
		if err := call(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s with empty id: %v", name, err)
		}
	}
	want := []string{
		`POST /v1/sandboxes/my%20box/contexts {"language":"python","cwd":"/tmp","env":{"A":"1"}}`,
		"GET /v1/sandboxes/my%20box/contexts",
		"POST /v1/sandboxes/my%20box/contexts/ctx%201/interrupt",
		"POST /v1/sandboxes/my%20box/contexts/ctx%201/restart",
		"DELETE /v1/sandboxes/my%20box/contexts/ctx%201",
		"DELETE /v1/sandboxes/my%20box/contexts/nope",
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}
