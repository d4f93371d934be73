package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// The tests below stand up an httptest.Server that speaks the daemon's wire
// format, so what is tested is the client's real HTTP handling.

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	status, code := errdefs.HTTPStatus(err)
	writeJSON(w, status, api.Error{Error: api.ErrorBody{Code: code, Message: err.Error()}})
}

func newServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *Client) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, New(srv.URL+"/", WithHTTPClient(srv.Client()))
}

func ptr[T any](v T) *T { return &v }

func TestAuthHeader(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			writeErr(w, errdefs.Unauthenticated("missing or wrong API key"))
			return
		}
		writeJSON(w, 200, map[string]string{"status": "ok"})
	}))
	defer srv.Close()
	ctx := context.Background()

	if err := New(srv.URL, WithAPIKey("s3cret")).Health(ctx); err != nil {
		t.Fatalf("with key: %v", err)
	}
	err := New(srv.URL).Health(ctx)
	if !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("without key: err = %v, want ErrUnauthenticated", err)
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 401 || ae.Code != "unauthenticated" || ae.Message != "missing or wrong API key" {
		t.Fatalf("APIError = %+v", ae)
	}
	if err.Error() != "missing or wrong API key" {
		t.Errorf("Error() = %q", err.Error())
	}
}

func TestFromEnv(t *testing.T) {
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		writeJSON(w, 200, map[string]string{"status": "ok"})
	}))
	defer srv.Close()
	t.Setenv(EnvURL, srv.URL)
	t.Setenv(EnvAPIKey, "k1")
	c := FromEnv()
	if c.BaseURL() != srv.URL {
		t.Errorf("BaseURL = %q", c.BaseURL())
	}
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gotAuth != "Bearer k1" {
		t.Errorf("Authorization = %q", gotAuth)
	}
	t.Setenv(EnvURL, "")
	if got := FromEnv().BaseURL(); got != DefaultURL {
		t.Errorf("default BaseURL = %q", got)
	}
}

func TestErrorDecoding(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		ctype      string
		body       string
		wantKind   error
		wantCode   string
		wantString string
	}{
		{"not found", 404, "application/json", `{"error":{"code":"not_found","message":"sandbox \"x\" not found"}}`, errdefs.ErrNotFound, "not_found", `sandbox "x" not found`},
		{"failed precondition", 409, "application/json", `{"error":{"code":"failed_precondition","message":"sandbox is terminated"}}`, errdefs.ErrFailedPrecondition, "failed_precondition", "sandbox is terminated"},
		{"conflict", 409, "application/json", `{"error":{"code":"conflict","message":"name taken"}}`, errdefs.ErrConflict, "conflict", "name taken"},
		{"too large", 413, "application/json", `{"error":{"code":"too_large","message":"file too large"}}`, errdefs.ErrTooLarge, "too_large", "file too large"},
		{"unknown code", 500, "application/json", `{"error":{"code":"internal","message":"boom"}}`, nil, "internal", "boom"},
		{"plain text", 502, "text/plain", "upstream down\n", nil, "internal", "upstream down"},
		{"html page", 503, "text/html", "<html><body>503</body></html>", errdefs.ErrUnavailable, "unavailable", "HTTP 503 Service Unavailable"},
		{"empty 404", 404, "", "", errdefs.ErrNotFound, "not_found", "HTTP 404 Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.ctype != "" {
					w.Header().Set("Content-Type", tt.ctype)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			_, err := c.GetSandbox(context.Background(), "x")
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %T %v, want *APIError", err, err)
			}
			if ae.Status != tt.status || ae.Code != tt.wantCode || err.Error() != tt.wantString {
				t.Errorf("got {%d %q %q}, want {%d %q %q}", ae.Status, ae.Code, err.Error(), tt.status, tt.wantCode, tt.wantString)
			}
			if tt.wantKind != nil && !errors.Is(err, tt.wantKind) {
				t.Errorf("errors.Is(err, %v) = false", tt.wantKind)
			}
			if tt.wantKind == nil && ae.Unwrap() != nil {
				t.Errorf("Unwrap() = %v, want nil", ae.Unwrap())
			}
		})
	}
}

func TestSandboxCalls(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	sb := api.Sandbox{ID: "sbx_1", Name: "my-box", State: api.StateRunning, Image: "python", CPUs: 0.5, MemoryMB: 512, CreatedAt: created, LastActiveAt: created}
	var mu sync.Mutex
	var seen []string
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.EscapedPath()+"?"+r.URL.RawQuery)
		mu.Unlock()
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/sandboxes":
			if ct := r.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			var raw map[string]any
			if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
				t.Errorf("decode: %v", err)
			}
			// Unset optional fields are omitted, set ones sent.
			want := map[string]any{"name": "my-box", "cpus": 0.5, "memory_mb": float64(512), "labels": map[string]any{"team": "a"}}
			if !reflect.DeepEqual(raw, want) {
				t.Errorf("create body = %v, want %v", raw, want)
			}
			writeJSON(w, 201, sb)
		case r.Method == "GET" && r.URL.Path == "/v1/sandboxes":
			writeJSON(w, 200, api.SandboxList{Sandboxes: []api.Sandbox{sb}})
		case r.Method == "GET" && r.URL.Path == "/v1/sandboxes/my-box":
			writeJSON(w, 200, sb)
		case r.Method == "DELETE" && r.URL.Path == "/v1/sandboxes/my-box":
			d := sb
			d.State = api.StateTerminated
			writeJSON(w, 200, d)
		default:
			writeErr(w, errdefs.NotFound("no route %s %s", r.Method, r.URL.Path))
		}
	})
	ctx := context.Background()

	got, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "my-box", CPUs: ptr(0.5), MemoryMB: ptr[int64](512), Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, sb) {
		t.Errorf("create = %+v", got)
	}

	list, err := c.ListSandboxes(ctx, ListOptions{State: "running", Name: "my-box", Labels: map[string]string{"team": "a", "env": "dev"}})
	if err != nil || len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != "sbx_1" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if _, err := c.GetSandbox(ctx, "my-box"); err != nil {
		t.Fatal(err)
	}
	d, err := c.DeleteSandbox(ctx, "my-box")
	if err != nil || d.State != api.StateTerminated {
		t.Fatalf("delete = %+v, %v", d, err)
	}
	// An id or name is sent as one escaped path segment (see want below).
	if _, err := c.GetSandbox(ctx, "we ird/x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSandbox(odd name) = %v, want not found", err)
	}

	want := []string{
		"POST /v1/sandboxes?",
		"GET /v1/sandboxes?label=env%3Adev&label=team%3Aa&limit=1000&name=my-box&state=running",
		"GET /v1/sandboxes/my-box?",
		"DELETE /v1/sandboxes/my-box?",
		"GET /v1/sandboxes/we%20ird%2Fx?",
	}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

func TestExec(t *testing.T) {
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/sandboxes/sbx_1/exec" {
			writeErr(w, errdefs.NotFound("no route"))
			return
		}
		var req api.ExecRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Cmd != "sh" || !reflect.DeepEqual(req.Args, []string{"-c", "exit 3"}) || *req.TimeoutSecs != 1.5 {
			t.Errorf("req = %+v", req)
		}
		writeJSON(w, 200, api.ExecResult{Stdout: "out", Stderr: "err", ExitCode: 3, DurationMS: 12})
	})
	res, err := c.Exec(context.Background(), "sbx_1", api.ExecRequest{Cmd: "sh", Args: []string{"-c", "exit 3"}, TimeoutSecs: ptr(1.5)})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Stdout != "out" || res.Stderr != "err" || res.DurationMS != 12 {
		t.Errorf("res = %+v", res)
	}
}

// sseServer answers exec with the given raw stream, written in pieces of at
// most chunk bytes with a flush after each, so event and line boundaries
// fall inside network reads.
func sseServer(t *testing.T, stream string, chunk int) *Client {
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "text/event-stream" {
			t.Errorf("Accept = %q", r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(200)
		f := w.(http.Flusher)
		for s := stream; len(s) > 0; {
			n := min(chunk, len(s))
			io.WriteString(w, s[:n])
			f.Flush()
			s = s[n:]
		}
	})
	return c
}

func sseEventText[S ~string](name S, v any) string {
	b, _ := json.Marshal(v)
	return "event: " + string(name) + "\ndata: " + string(b) + "\n\n"
}

func TestExecStream(t *testing.T) {
	var stream strings.Builder
	stream.WriteString(": connected\n\n")
	stream.WriteString(sseEventText("stdout", api.OutputChunk{Data: "line 1\n"}))
	stream.WriteString(sseEventText("stderr", api.OutputChunk{Data: "warn: ü\n"}))
	stream.WriteString("event: stdout\r\ndata: {\"data\":\r\ndata: \"line 2\\n\"}\r\n\r\n") // multi-line data, CRLF
	stream.WriteString(sseEventText("progress", map[string]int{"x": 1}))                    // unknown: skipped
	stream.WriteString("event: exit\ndata: {\"exit_code\": 2,\ndata:  \"duration_ms\": 40}\n\n")

	for _, chunk := range []int{1, 2, 3, 7, 1 << 20} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			c := sseServer(t, stream.String(), chunk)
			var got []string
			res, err := c.ExecStream(context.Background(), "sbx_1", api.ExecRequest{Cmd: "x"},
				func(b []byte) { got = append(got, "out:"+string(b)) },
				func(b []byte) { got = append(got, "err:"+string(b)) })
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"out:line 1\n", "err:warn: ü\n", "out:line 2\n"}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("output = %q, want %q", got, want)
			}
			if res.ExitCode != 2 || res.DurationMS != 40 {
				t.Errorf("res = %+v", res)
			}
		})
	}
}

func TestExecStreamNilCallbacks(t *testing.T) {
	c := sseServer(t, sseEventText("stdout", api.OutputChunk{Data: "x"})+sseEventText("exit", api.ExecResult{}), 1<<20)
	if _, err := c.ExecStream(context.Background(), "sbx_1", api.ExecRequest{Cmd: "x"}, nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestExecStreamErrors(t *testing.T) {
	out := sseEventText("stdout", api.OutputChunk{Data: "partial"})
	t.Run("error event", func(t *testing.T) {
		c := sseServer(t, out+sseEventText("error", api.ErrorBody{Code: "timeout", Message: "exec timed out"}), 5)
		_, err := c.ExecStream(context.Background(), "sbx_1", api.ExecRequest{Cmd: "x"}, nil, nil)
		var ae *APIError
		if !errors.Is(err, errdefs.ErrTimeout) || !errors.As(err, &ae) || ae.Status != 504 || ae.Message != "exec timed out" {
			t.Fatalf("err = %#v", err)
		}
	})
	t.Run("cut before exit", func(t *testing.T) {
		c := sseServer(t, out+"event: exit\ndata: {\"exit_code\":0}\n", 5) // no blank line: never dispatched
		_, err := c.ExecStream(context.Background(), "sbx_1", api.ExecRequest{Cmd: "x"}, nil, nil)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v, want ErrUnexpectedEOF", err)
		}
	})
	t.Run("bad chunk json", func(t *testing.T) {
		c := sseServer(t, "event: stdout\ndata: {nope\n\n", 5)
		if _, err := c.ExecStream(context.Background(), "sbx_1", api.ExecRequest{Cmd: "x"}, nil, nil); err == nil {
			t.Fatal("want error")
		}
	})
	t.Run("http error before stream", func(t *testing.T) {
		_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			writeErr(w, errdefs.FailedPrecondition("sandbox sbx_1 is terminated"))
		})
		_, err := c.ExecStream(context.Background(), "sbx_1", api.ExecRequest{Cmd: "x"}, nil, nil)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestExecStreamJSONFallback(t *testing.T) {
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.ExecResult{Stdout: "o", Stderr: "e", ExitCode: 1})
	})
	var o, e string
	res, err := c.ExecStream(context.Background(), "sbx_1", api.ExecRequest{Cmd: "x"},
		func(b []byte) { o += string(b) }, func(b []byte) { e += string(b) })
	if err != nil {
		t.Fatal(err)
	}
	if o != "o" || e != "e" || res.ExitCode != 1 || res.Stdout != "" {
		t.Errorf("o=%q e=%q res=%+v", o, e, res)
	}
}

func TestExecStreamCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseEventText("stdout", api.OutputChunk{Data: "tick"}))
		w.(http.Flusher).Flush()
		select { // a command that never ends
		case <-r.Context().Done():
		case <-release:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.ExecStream(ctx, "sbx_1", api.ExecRequest{Cmd: "x"}, func([]byte) { cancel() }, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ExecStream did not return after cancel")
	}
}

func TestWriteFileStreams(t *testing.T) {
	gotFirst := make(chan struct{})
	var body bytes.Buffer
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "PUT" || r.URL.Path != "/v1/sandboxes/sbx_1/files" {
			writeErr(w, errdefs.NotFound("no route"))
			return
		}
		q := r.URL.Query()
		if q.Get("path") != "data/in.csv" || q.Get("mode") != "0755" {
			t.Errorf("query = %v", q)
		}
		if r.ContentLength != -1 || len(r.TransferEncoding) == 0 || r.TransferEncoding[0] != "chunked" {
			t.Errorf("ContentLength=%d TransferEncoding=%v, want chunked", r.ContentLength, r.TransferEncoding)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/octet-stream" {
			t.Errorf("Content-Type = %q", ct)
		}
		first := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, first); err != nil {
			t.Errorf("read first: %v", err)
		}
		body.Write(first)
		close(gotFirst)
		n, _ := io.Copy(&body, r.Body)
		writeJSON(w, 200, api.WriteFileResult{Path: "/workspace/data/in.csv", Size: n + 5})
	})

	// The server must see the first bytes while the caller still holds the
	// rest back: proof that the body is streamed, not buffered first.
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("hello"))
		select {
		case <-gotFirst:
			pw.Write([]byte(", world"))
			pw.Close()
		case <-time.After(5 * time.Second):
			pw.CloseWithError(errors.New("server never saw the first bytes: body is buffered"))
		}
	}()
	res, err := c.WriteFile(context.Background(), "sbx_1", "data/in.csv", pr, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if res.Size != 12 || res.Path != "/workspace/data/in.csv" || body.String() != "hello, world" {
		t.Errorf("res = %+v body = %q", res, body.String())
	}
}

func TestWriteFileKnownLength(t *testing.T) {
	type seen struct {
		length int64
		mode   string
		body   string
	}
	var got seen
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = seen{r.ContentLength, r.URL.Query().Get("mode"), string(b)}
		writeJSON(w, 200, api.WriteFileResult{Path: r.URL.Query().Get("path"), Size: int64(len(b))})
	})
	ctx := context.Background()

	if _, err := c.WriteFile(ctx, "sbx_1", "a", strings.NewReader("abc"), 0); err != nil {
		t.Fatal(err)
	}
	if got != (seen{3, "", "abc"}) {
		t.Errorf("strings.Reader: %+v", got)
	}
	if _, err := c.WriteFile(ctx, "sbx_1", "a", bytes.NewReader(nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if got != (seen{0, "0600", ""}) {
		t.Errorf("empty: %+v", got)
	}

	// A file is sent from its current offset with its length, and stays open.
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("0123456789"), 0o644)
	f, _ := os.Open(p)
	defer f.Close()
	f.Seek(4, io.SeekStart)
	if _, err := c.WriteFile(ctx, "sbx_1", "a", f, 0o644); err != nil {
		t.Fatal(err)
	}
	if got != (seen{6, "0644", "456789"}) {
		t.Errorf("file: %+v", got)
	}
	if _, err := f.Stat(); err != nil {
		t.Errorf("caller's file was closed: %v", err)
	}
}

func TestWriteFileRejected(t *testing.T) {
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, errdefs.TooLarge("file exceeds the sandbox's disk"))
	})
	_, err := c.WriteFile(context.Background(), "sbx_1", "big", strings.NewReader(strings.Repeat("x", 1<<20)), 0)
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("err = %v", err)
	}
}

func TestReadFile(t *testing.T) {
	content := bytes.Repeat([]byte("forkbox\x00\xff"), 512<<10) // 4.5 MiB, binary
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("path") {
		case "big.bin":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(content)
		case "cut.bin":
			w.Header().Set("Content-Length", "1000")
			w.Write(content[:10])
			panic(http.ErrAbortHandler) // drop the connection mid-body
		default:
			writeErr(w, errdefs.NotFound("file %q not found", r.URL.Query().Get("path")))
		}
	})
	ctx := context.Background()

	b, err := c.ReadFile(ctx, "sbx_1", "big.bin")
	if err != nil || !bytes.Equal(b, content) {
		t.Fatalf("ReadFile: %d bytes, %v", len(b), err)
	}
	var buf bytes.Buffer
	n, err := c.ReadFileTo(ctx, "sbx_1", "big.bin", &buf)
	if err != nil || n != int64(len(content)) || !bytes.Equal(buf.Bytes(), content) {
		t.Fatalf("ReadFileTo: %d, %v", n, err)
	}
	if _, err := c.ReadFileTo(ctx, "sbx_1", "cut.bin", io.Discard); err == nil {
		t.Error("truncated body: want error")
	}
	if _, err := c.ReadFile(ctx, "sbx_1", "nope"); !errors.Is(err, errdefs.ErrNotFound) || err.Error() != `file "nope" not found` {
		t.Errorf("missing file: %v", err)
	}
}

func TestListAndRemoveFiles(t *testing.T) {
	var got []string
	_, c := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		switch r.Method {
		case "GET":
			writeJSON(w, 200, api.FileList{Path: "/workspace", Entries: []api.FileInfo{{Name: "a.txt", Path: "/workspace/a.txt", Type: "file", Size: 3, Mode: "0644"}}})
		case "DELETE":
			w.WriteHeader(http.StatusNoContent)
		}
	})
	ctx := context.Background()
	list, err := c.ListFiles(ctx, "sbx_1", ".")
	if err != nil || len(list.Entries) != 1 || list.Entries[0].Name != "a.txt" {
		t.Fatalf("ListFiles = %+v, %v", list, err)
	}
	if err := c.RemoveFile(ctx, "sbx_1", "a.txt", false); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveFile(ctx, "sbx_1", "dir", true); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"GET /v1/sandboxes/sbx_1/files/list?path=.",
		"DELETE /v1/sandboxes/sbx_1/files?path=a.txt",
		"DELETE /v1/sandboxes/sbx_1/files?path=dir&recursive=true",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("requests = %q, want %q", got, want)
	}
}

func TestReexportedKinds(t *testing.T) {
	err := &APIError{Status: 404, Code: "not_found"}
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatal("client.ErrNotFound and errdefs.ErrNotFound must be the same kind")
	}
}
