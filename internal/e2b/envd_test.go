package e2b

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"path"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sandbox"
)

const testSandbox = "sbx_envdtest"

// mtime is every fake file's modification time (Appendix B's example).
var mtime = time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)

// fakeBackend is a sandbox with an in-memory filesystem. Exec runs
// /bin/mkdir -p and /bin/mv -T against it, and anything else through run.
type fakeBackend struct {
	t     *testing.T
	mu    sync.Mutex
	files map[string][]byte
	modes map[string]uint32
	dirs  map[string]bool
	execs []api.ExecRequest
	run   func(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error)
	// procs are the running commands of runLong, by ExecOptions.ID.
	procs map[string]*fakeProc
}

// fakeProc is a command of runLong while it runs.
type fakeProc struct {
	input  chan []byte // nil data: stdin closed
	signal chan string
	resize chan sandbox.PTYSize
	opts   sandbox.ExecOptions
}

// runLong is a run that behaves like "while read l; do echo got:$l; done":
// it answers each input line on stdout, exits 0 when stdin is closed and
// ends by a signal it is sent. With a PTY it answers on the terminal, and
// a resize with "size:COLSxROWS".
func (f *fakeBackend) runLong(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
	if opts.ID == "" {
		f.t.Error("a command run without an id")
	}
	p := &fakeProc{input: make(chan []byte), signal: make(chan string), resize: make(chan sandbox.PTYSize), opts: opts}
	out := opts.OnStdout
	if opts.PTY != nil {
		out = opts.OnPTY
	}
	f.mu.Lock()
	if f.procs == nil {
		f.procs = map[string]*fakeProc{}
	}
	f.procs[opts.ID] = p
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.procs, opts.ID)
		f.mu.Unlock()
	}()
	opts.OnStart()
	for {
		select {
		case b := <-p.input:
			if b == nil {
				return &api.ExecResult{}, nil
			}
			out([]byte("got:" + string(b)))
		case sz := <-p.resize:
			out([]byte(fmt.Sprintf("size:%dx%d", sz.Cols, sz.Rows)))
		case sig := <-p.signal:
			return &api.ExecResult{ExitCode: -1, Signal: sig}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *fakeBackend) proc(id string) (*fakeProc, error) {
	if err := f.checkRef(testSandbox); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.procs[id]
	if p == nil {
		return nil, errdefs.NotFound("no running exec %q", id)
	}
	return p, nil
}

func (f *fakeBackend) ExecInput(ctx context.Context, ref, id string, data []byte, closeStdin bool) error {
	if err := f.checkRef(ref); err != nil {
		return err
	}
	p, err := f.proc(id)
	if err != nil {
		return err
	}
	if !p.opts.KeepStdin {
		return errdefs.FailedPrecondition("exec %q runs without stdin", id)
	}
	var sends [][]byte
	if len(data) > 0 {
		sends = append(sends, data)
	}
	if closeStdin {
		sends = append(sends, nil)
	}
	for _, b := range sends {
		select {
		case p.input <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (f *fakeBackend) ExecSignal(ctx context.Context, ref, id, signal string) error {
	if err := f.checkRef(ref); err != nil {
		return err
	}
	p, err := f.proc(id)
	if err != nil {
		return err
	}
	select {
	case p.signal <- signal:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeBackend) ExecResize(ctx context.Context, ref, id string, size sandbox.PTYSize) error {
	if err := f.checkRef(ref); err != nil {
		return err
	}
	p, err := f.proc(id)
	if err != nil {
		return err
	}
	if p.opts.PTY == nil {
		return errdefs.FailedPrecondition("exec %q runs without a pty", id)
	}
	select {
	case p.resize <- size:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newFakeBackend(t *testing.T) *fakeBackend {
	return &fakeBackend{t: t, files: map[string][]byte{}, modes: map[string]uint32{},
		dirs: map[string]bool{"/": true, "/home": true, "/home/user": true, "/tmp": true}}
}

func (f *fakeBackend) checkRef(ref string) error {
	if ref != testSandbox {
		f.t.Errorf("backend called for sandbox %q, want %q", ref, testSandbox)
		return errdefs.NotFound("sandbox %q", ref)
	}
	return nil
}

// mkdirAll makes p and its parents; f.mu is held.
func (f *fakeBackend) mkdirAll(p string) error {
	if p == "/" {
		return nil
	}
	if err := f.mkdirAll(path.Dir(p)); err != nil {
		return err
	}
	if _, ok := f.files[p]; ok {
		return fmt.Errorf("%s: not a directory", p)
	}
	f.dirs[p] = true
	return nil
}

func (f *fakeBackend) Exec(ctx context.Context, ref string, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
	if err := f.checkRef(ref); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.execs = append(f.execs, *req)
	f.mu.Unlock()
	switch req.Cmd {
	case "/bin/mkdir":
		if len(req.Args) != 3 || req.Args[0] != "-p" || req.Args[1] != "--" {
			f.t.Errorf("mkdir args %q", req.Args)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.mkdirAll(req.Args[2]); err != nil {
			return &api.ExecResult{ExitCode: 1, Stderr: fmt.Sprintf("mkdir: cannot create directory '%s': Not a directory\n", req.Args[2])}, nil
		}
		return &api.ExecResult{}, nil
	case "/bin/mv":
		if len(req.Args) != 4 || req.Args[0] != "-T" || req.Args[1] != "--" {
			f.t.Errorf("mv args %q", req.Args)
		}
		src, dst := req.Args[2], req.Args[3]
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.dirs[path.Dir(dst)] {
			return &api.ExecResult{ExitCode: 1, Stderr: fmt.Sprintf("mv: cannot move '%s' to '%s': No such file or directory\n", src, dst)}, nil
		}
		moved := false
		for p, b := range f.files {
			if p == src || strings.HasPrefix(p, src+"/") {
				delete(f.files, p)
				f.files[dst+strings.TrimPrefix(p, src)] = b
				moved = true
			}
		}
		for p := range f.dirs {
			if p == src || strings.HasPrefix(p, src+"/") {
				delete(f.dirs, p)
				f.dirs[dst+strings.TrimPrefix(p, src)] = true
				moved = true
			}
		}
		if !moved {
			return &api.ExecResult{ExitCode: 1, Stderr: fmt.Sprintf("mv: cannot stat '%s': No such file or directory\n", src)}, nil
		}
		return &api.ExecResult{}, nil
	}
	if f.run == nil {
		f.t.Errorf("unexpected exec %+v", req)
		return nil, errdefs.InvalidArgument("unexpected exec")
	}
	return f.run(ctx, req, opts)
}

func (f *fakeBackend) ReadFile(ctx context.Context, ref, p string) (io.ReadCloser, int64, error) {
	if err := f.checkRef(ref); err != nil {
		return nil, 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if b, ok := f.files[p]; ok {
		return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
	}
	if f.dirs[p] {
		return nil, 0, errdefs.InvalidArgument("%s is a directory", p)
	}
	return nil, 0, errdefs.NotFound("%s: no such file or directory", p)
}

func (f *fakeBackend) WriteFile(ctx context.Context, ref, p string, mode uint32, body io.Reader) (*api.WriteFileResult, error) {
	if err := f.checkRef(ref); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, fmt.Errorf("read upload: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dirs[p] {
		return nil, errdefs.InvalidArgument("%s is a directory", p)
	}
	if err := f.mkdirAll(path.Dir(p)); err != nil {
		return nil, errdefs.InvalidArgument("%v", err)
	}
	f.files[p] = b
	f.modes[p] = mode
	return &api.WriteFileResult{Path: p, Size: int64(len(b))}, nil
}

func (f *fakeBackend) RemoveFile(ctx context.Context, ref, p string, recursive bool) error {
	if err := f.checkRef(ref); err != nil {
		return err
	}
	if !recursive {
		f.t.Errorf("RemoveFile(%s) not recursive", p)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.files[p]; ok {
		delete(f.files, p)
		return nil
	}
	if !f.dirs[p] {
		return errdefs.NotFound("%s: no such file or directory", p)
	}
	for q := range f.files {
		if strings.HasPrefix(q, p+"/") {
			delete(f.files, q)
		}
	}
	for q := range f.dirs {
		if q == p || strings.HasPrefix(q, p+"/") {
			delete(f.dirs, q)
		}
	}
	return nil
}

func (f *fakeBackend) ListFiles(ctx context.Context, ref, p string) (*api.FileList, error) {
	if err := f.checkRef(ref); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.files[p]; ok {
		return nil, errdefs.InvalidArgument("%s is not a directory (it is a file)", p)
	}
	if !f.dirs[p] {
		return nil, errdefs.NotFound("%s: no such file or directory", p)
	}
	out := &api.FileList{Path: p, Entries: []api.FileInfo{}}
	for q, b := range f.files {
		if path.Dir(q) == p {
			out.Entries = append(out.Entries, api.FileInfo{Name: path.Base(q), Path: q, Type: "file", Size: int64(len(b)), Mode: "0644", ModifiedAt: mtime})
		}
	}
	for q := range f.dirs {
		if q != "/" && path.Dir(q) == p {
			out.Entries = append(out.Entries, api.FileInfo{Name: path.Base(q), Path: q, Type: "dir", Size: 4096, Mode: "0755", ModifiedAt: mtime})
		}
	}
	// Forkbox lists in name order; this one does not, to show envd sorts.
	sort.Slice(out.Entries, func(i, j int) bool { return out.Entries[i].Name > out.Entries[j].Name })
	return out, nil
}

func (f *fakeBackend) put(p, content string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mkdirAll(path.Dir(p)); err != nil {
		f.t.Fatal(err)
	}
	f.files[p] = []byte(content)
}

func (f *fakeBackend) get(p string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[p]
	return string(b), ok
}

func (f *fakeBackend) mode(p string) uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.modes[p]
}

func (f *fakeBackend) execList() []api.ExecRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.ExecRequest(nil), f.execs...)
}

func (f *fakeBackend) isDir(p string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dirs[p]
}

// startEnvd serves newEnvd over HTTP for the fake's sandbox, as the data
// plane's dispatch would (sandbox resolved into the context).
func startEnvd(t *testing.T, b Backend) (*httptest.Server, *envd) {
	t.Helper()
	h := newEnvd(b, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(withSandbox(r.Context(), testSandbox)))
	}))
	t.Cleanup(srv.Close)
	return srv, h.(*envd)
}

// jsonEqual reports whether two JSON texts are the same value.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("answer is not JSON: %v: %q", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %q: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("JSON:\n got %s\nwant %s", got, want)
	}
}

// unary posts a Connect unary JSON request as the SDKs do.
func unary(t *testing.T, srv *httptest.Server, method, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/"+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("E2b-Sandbox-Port", EnvdPort)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", method, ct)
	}
	return resp.StatusCode, b
}

// connectErrorCode is the code of a Connect error body.
func connectErrorCode(t *testing.T, b []byte) (code, msg string) {
	t.Helper()
	var e struct{ Code, Message string }
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	return e.Code, e.Message
}

// envelope is one Connect streaming frame: flags, u32 big-endian length,
// payload.
func envelope(flags byte, payload []byte) []byte {
	out := make([]byte, 5, 5+len(payload))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(payload)))
	return append(out, payload...)
}

type frame struct {
	flags byte
	data  []byte
}

func readFrame(r *bufio.Reader) (frame, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	data := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	if _, err := io.ReadFull(r, data); err != nil {
		return frame{}, fmt.Errorf("frame of %d bytes cut short: %w", len(data), err)
	}
	return frame{hdr[0], data}, nil
}

// startStream posts a Start request as the JS SDK does (§9's trace) and
// returns the response with its body to read frames from.
func startStream(t *testing.T, srv *httptest.Server, body string, hdr ...string) (*http.Response, *bufio.Reader) {
	t.Helper()
	return rpcStream(t, srv, "process.Process/Start", body, hdr...)
}

// rpcStream posts a server-streaming request (Start, Connect) as the JS SDK
// does.
func rpcStream(t *testing.T, srv *httptest.Server, method, body string, hdr ...string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/"+method, bytes.NewReader(envelope(0, []byte(body))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", "60000")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	req.Header.Set("E2b-Sandbox-Id", testSandbox)
	req.Header.Set("E2b-Sandbox-Port", EnvdPort)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: HTTP %d: %s", method, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/connect+json" {
		t.Fatalf("%s: Content-Type %q, want application/connect+json", method, ct)
	}
	return resp, bufio.NewReader(resp.Body)
}

// allFrames reads frames to the end of the body, checking that exactly the
// last is the end-stream frame.
func allFrames(t *testing.T, r *bufio.Reader) (msgs [][]byte, end []byte) {
	t.Helper()
	for {
		f, err := readFrame(r)
		if err == io.EOF {
			t.Fatal("stream ended without an end-stream frame")
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.flags == 0x02 {
			if _, err := readFrame(r); err != io.EOF {
				t.Fatalf("frames after the end-stream frame (err %v)", err)
			}
			return msgs, f.data
		}
		if f.flags != 0 {
			t.Fatalf("frame flags %#x", f.flags)
		}
		msgs = append(msgs, f.data)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestStartStreamsStartDataEnd(t *testing.T) {
	fb := newFakeBackend(t)
	fb.run = func(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
		opts.OnStdout([]byte("a.txt\n"))
		opts.OnStderr([]byte("warn\n"))
		opts.OnStdout([]byte("b.txt\n"))
		return &api.ExecResult{ExitCode: 3}, nil
	}
	srv, _ := startEnvd(t, fb)

	// Exactly the JS SDK's commands.run('ls', {envs, cwd}).
	_, r := startStream(t, srv, `{"process":{"cmd":"/bin/bash","args":["-l","-c","ls"],"envs":{"A":"1"},"cwd":"/tmp"},"stdin":false}`)
	msgs, end := allFrames(t, r)
	if len(msgs) != 5 {
		t.Fatalf("got %d messages, want start, 3 data, end: %q", len(msgs), msgs)
	}
	jsonEqual(t, msgs[0], `{"event":{"start":{"pid":1000}}}`)
	jsonEqual(t, msgs[1], `{"event":{"data":{"stdout":"`+b64("a.txt\n")+`"}}}`)
	jsonEqual(t, msgs[2], `{"event":{"data":{"stderr":"`+b64("warn\n")+`"}}}`)
	jsonEqual(t, msgs[3], `{"event":{"data":{"stdout":"`+b64("b.txt\n")+`"}}}`)
	jsonEqual(t, msgs[4], `{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}}`)
	jsonEqual(t, end, `{}`)

	execs := fb.execList()
	if len(execs) != 1 {
		t.Fatalf("execs %+v", execs)
	}
	got := execs[0]
	want := api.ExecRequest{Cmd: "/bin/bash", Args: []string{"-l", "-c", "ls"}, Env: map[string]string{"A": "1"}, Cwd: "/tmp"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("exec request %+v, want %+v", got, want)
	}

	// The next process of the sandbox has the next pid; no cwd is the
	// home directory; exit 0 has neither exitCode nor error (protojson
	// omits defaults).
	fb.run = func(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
		return &api.ExecResult{}, nil
	}
	_, r = startStream(t, srv, `{"process":{"cmd":"true"}}`)
	msgs, end = allFrames(t, r)
	if len(msgs) != 2 {
		t.Fatalf("messages %q", msgs)
	}
	jsonEqual(t, msgs[0], `{"event":{"start":{"pid":1001}}}`)
	jsonEqual(t, msgs[1], `{"event":{"end":{"exited":true,"status":"exit status 0"}}}`)
	jsonEqual(t, end, `{}`)
	if c := fb.execList()[1].Cwd; c != homeDir {
		t.Errorf("default cwd %q, want %q", c, homeDir)
	}
}

func TestStartSignalEnd(t *testing.T) {
	fb := newFakeBackend(t)
	fb.run = func(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
		return &api.ExecResult{ExitCode: -1, Signal: "SIGKILL"}, nil
	}
	srv, _ := startEnvd(t, fb)
	_, r := startStream(t, srv, `{"process":{"cmd":"/bin/bash","args":["-l","-c","kill -9 $$"],"cwd":"proj"}}`)
	msgs, _ := allFrames(t, r)
	jsonEqual(t, msgs[len(msgs)-1], `{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}`)
	if c := fb.execList()[0].Cwd; c != "/home/user/proj" {
		t.Errorf("relative cwd resolved to %q", c)
	}

	// What forkbox knows beyond the status comes along in error.
	fb.run = func(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
		return &api.ExecResult{ExitCode: -1, Signal: "SIGKILL", OOMKilled: true, Error: "killed by the kernel: out of memory"}, nil
	}
	_, r = startStream(t, srv, `{"process":{"cmd":"python3"}}`)
	msgs, _ = allFrames(t, r)
	jsonEqual(t, msgs[len(msgs)-1], `{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed (killed by the kernel: out of memory)"}}}`)
}

// TestStartStreamsLive checks that events leave while the command runs
// (output, keepalives), that List shows the running command, and that the
// end comes once it is done.
func TestStartStreamsLive(t *testing.T) {
	fb := newFakeBackend(t)
	release := make(chan struct{})
	fb.run = func(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
		opts.OnStdout([]byte("working\n"))
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		opts.OnStdout([]byte("done\n"))
		return &api.ExecResult{}, nil
	}
	srv, e := startEnvd(t, fb)
	e.keepalive = 20 * time.Millisecond

	_, r := startStream(t, srv, `{"process":{"cmd":"/bin/bash","args":["-l","-c","sleep 1"]},"tag":"job"}`)
	next := func() []byte {
		t.Helper()
		f, err := readFrame(r)
		if err != nil {
			t.Fatal(err)
		}
		if f.flags != 0 {
			t.Fatalf("frame flags %#x: %s", f.flags, f.data)
		}
		return f.data
	}
	jsonEqual(t, next(), `{"event":{"start":{"pid":1000}}}`)
	// The output, while the command still runs (a keepalive may come
	// first on a slow machine), then keepalives while it is silent.
	m := next()
	for bytes.Contains(m, []byte(`"keepalive"`)) {
		m = next()
	}
	jsonEqual(t, m, `{"event":{"data":{"stdout":"`+b64("working\n")+`"}}}`)
	jsonEqual(t, next(), `{"event":{"keepalive":{}}}`)

	status, body := unary(t, srv, "process.Process/List", `{}`)
	if status != http.StatusOK {
		t.Fatalf("List: %d %s", status, body)
	}
	jsonEqual(t, body, `{"processes":[{"config":{"cmd":"/bin/bash","args":["-l","-c","sleep 1"],"cwd":"/home/user"},"pid":1000,"tag":"job"}]}`)

	close(release)
	msgs, end := allFrames(t, r)
	var data, ends int
	for _, m := range msgs {
		switch {
		case bytes.Contains(m, []byte(`"keepalive"`)):
		case bytes.Contains(m, []byte(`"data"`)):
			jsonEqual(t, m, `{"event":{"data":{"stdout":"`+b64("done\n")+`"}}}`)
			data++
		case bytes.Contains(m, []byte(`"end"`)):
			jsonEqual(t, m, `{"event":{"end":{"exited":true,"status":"exit status 0"}}}`)
			ends++
		default:
			t.Errorf("unexpected message %s", m)
		}
	}
	if data != 1 || ends != 1 || !bytes.Contains(msgs[len(msgs)-1], []byte(`"end"`)) {
		t.Errorf("after release: %q", msgs)
	}
	jsonEqual(t, end, `{}`)

	status, body = unary(t, srv, "process.Process/List", `{}`)
	if status != http.StatusOK {
		t.Fatalf("List: %d %s", status, body)
	}
	jsonEqual(t, body, `{}`)
}

func TestStartDeadline(t *testing.T) {
	fb := newFakeBackend(t)
	hadDeadline := make(chan bool, 1)
	fb.run = func(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
		_, ok := ctx.Deadline()
		hadDeadline <- ok
		<-ctx.Done()
		return nil, ctx.Err() // what the agent client answers
	}
	srv, _ := startEnvd(t, fb)
	_, r := startStream(t, srv, `{"process":{"cmd":"sleep","args":["60"]}}`, "Connect-Timeout-Ms", "100")
	msgs, end := allFrames(t, r)
	if len(msgs) != 1 {
		t.Fatalf("messages %q, want only start", msgs)
	}
	jsonEqual(t, msgs[0], `{"event":{"start":{"pid":1000}}}`)
	var es struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(end, &es); err != nil {
		t.Fatal(err)
	}
	if es.Error.Code != "deadline_exceeded" || !strings.Contains(es.Error.Message, "Connect-Timeout-Ms") {
		t.Errorf("end-stream %s, want deadline_exceeded naming Connect-Timeout-Ms", end)
	}
	if !<-hadDeadline {
		t.Error("the command ran without the request's deadline")
	}
}

func TestStartErrors(t *testing.T) {
	fb := newFakeBackend(t)
	fb.run = func(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
		return nil, errdefs.InvalidArgument("env: %q is not a valid variable name", "1A")
	}
	srv, _ := startEnvd(t, fb)
	cases := []struct {
		name, body, code, msg string
		hdr                   []string
	}{
		{"pty size", `{"process":{"cmd":"/bin/bash","args":["-i","-l"]},"pty":{"size":{"cols":0,"rows":24}}}`, "invalid_argument", "pty size", nil},
		{"pty too large", `{"process":{"cmd":"/bin/bash","args":["-i","-l"]},"pty":{"size":{"cols":80,"rows":1001}}}`, "invalid_argument", "pty size", nil},
		{"pty without size", `{"process":{"cmd":"/bin/bash","args":["-i","-l"]},"pty":{}}`, "invalid_argument", "pty.size", nil},
		{"no cmd", `{"process":{}}`, "invalid_argument", "cmd", nil},
		{"backend", `{"process":{"cmd":"env","envs":{"1A":"x"}}}`, "invalid_argument", "not a valid variable name", nil},
		{"root", `{"process":{"cmd":"id"}}`, "permission_denied", "forkbox runs sandbox code as 'user' only",
			[]string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, r := startStream(t, srv, c.body, c.hdr...)
			_, end := allFrames(t, r)
			var es struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(end, &es); err != nil {
				t.Fatal(err)
			}
			if es.Error.Code != c.code || !strings.Contains(es.Error.Message, c.msg) {
				t.Errorf("end-stream %s, want code %s and %q in the message", end, c.code, c.msg)
			}
		})
	}
	// The user the SDKs name by default passes.
	fb.run = func(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
		return &api.ExecResult{}, nil
	}
	_, r := startStream(t, srv, `{"process":{"cmd":"id"}}`, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("user:")))
	msgs, _ := allFrames(t, r)
	if len(msgs) != 2 {
		t.Errorf("as user: %q", msgs)
	}
}

// TestPTY is the SDK's pty.create, sendInput, resize and kill: the
// command runs on a terminal, its output comes as data.pty, input.pty goes
// to it, Update resizes it.
func TestPTY(t *testing.T) {
	fb := newFakeBackend(t)
	var gotOpts sandbox.ExecOptions
	var gotReq *api.ExecRequest
	var optsMu sync.Mutex
	fb.run = func(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
		optsMu.Lock()
		gotOpts, gotReq = opts, req
		optsMu.Unlock()
		return fb.runLong(ctx, req, opts)
	}
	srv, _ := startEnvd(t, fb)

	// Exactly what the JS SDK's pty.create({cols: 80, rows: 24}) sends.
	_, r := startStream(t, srv, `{"process":{"cmd":"/bin/bash","args":["-i","-l"],"envs":{"TERM":"xterm-256color","LANG":"C.UTF-8","LC_ALL":"C.UTF-8"}},"pty":{"size":{"cols":80,"rows":24}}}`)
	jsonEqual(t, nextEvent(t, r), `{"event":{"start":{"pid":1000}}}`)

	status, body := unary(t, srv, "process.Process/SendInput", `{"process":{"pid":1000},"input":{"pty":"`+b64("ls\n")+`"}}`)
	if status != http.StatusOK {
		t.Fatalf("SendInput: %d %s", status, body)
	}
	jsonEqual(t, nextEvent(t, r), `{"event":{"data":{"pty":"`+b64("got:ls\n")+`"}}}`)
	optsMu.Lock()
	if gotOpts.PTY == nil || *gotOpts.PTY != (sandbox.PTYSize{Cols: 80, Rows: 24}) || !gotOpts.KeepStdin || gotOpts.OnPTY == nil {
		t.Errorf("exec options %+v, want a pty of 80x24 with stdin kept", gotOpts)
	}
	if gotReq.Cmd != "/bin/bash" || gotReq.Env["TERM"] != "xterm-256color" {
		t.Errorf("exec %+v", gotReq)
	}
	optsMu.Unlock()

	status, body = unary(t, srv, "process.Process/Update", `{"process":{"pid":1000},"pty":{"size":{"cols":100,"rows":30}}}`)
	if status != http.StatusOK {
		t.Fatalf("Update: %d %s", status, body)
	}
	jsonEqual(t, body, `{}`)
	jsonEqual(t, nextEvent(t, r), `{"event":{"data":{"pty":"`+b64("size:100x30")+`"}}}`)
	for _, c := range []struct{ body, code string }{
		{`{"process":{"pid":1000},"pty":{"size":{"cols":100,"rows":0}}}`, "invalid_argument"},
		{`{"process":{"pid":1000},"pty":{"size":{"cols":1001,"rows":30}}}`, "invalid_argument"},
		{`{"process":{"pid":1000},"pty":{}}`, "invalid_argument"},
		{`{"process":{"pid":4242},"pty":{"size":{"cols":100,"rows":30}}}`, "not_found"},
	} {
		_, b := unary(t, srv, "process.Process/Update", c.body)
		if code, _ := connectErrorCode(t, b); code != c.code {
			t.Errorf("Update %s: %s, want %s", c.body, b, c.code)
		}
	}

	// pty.kill
	status, body = unary(t, srv, "process.Process/SendSignal", `{"process":{"pid":1000},"signal":"SIGNAL_SIGKILL"}`)
	if status != http.StatusOK {
		t.Fatalf("SendSignal: %d %s", status, body)
	}
	msgs, code := endStreamCode(t, r)
	if code != "" || len(msgs) == 0 {
		t.Fatalf("Start ended %q, code %q", msgs, code)
	}
	jsonEqual(t, msgs[len(msgs)-1], `{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}`)
	for method, body := range map[string]string{
		"Update":    `{"process":{"pid":1000},"pty":{"size":{"cols":80,"rows":24}}}`,
		"SendInput": `{"process":{"pid":1000},"input":{"pty":"aGkK"}}`,
	} {
		status, b := unary(t, srv, "process.Process/"+method, body)
		if code, _ := connectErrorCode(t, b); status != http.StatusNotFound || code != "not_found" {
			t.Errorf("%s after the end: HTTP %d %s", method, status, b)
		}
	}
}

// TestPTYOnPlainProcess: a command started without a pty takes no pty
// input and no resize.
func TestPTYOnPlainProcess(t *testing.T) {
	fb := newFakeBackend(t)
	fb.run = fb.runLong
	srv, _ := startEnvd(t, fb)
	_, r := startStream(t, srv, `{"process":{"cmd":"/bin/bash","args":["-l","-c","cat"]},"stdin":true}`)
	jsonEqual(t, nextEvent(t, r), `{"event":{"start":{"pid":1000}}}`)
	for method, body := range map[string]string{
		"Update":    `{"process":{"pid":1000},"pty":{"size":{"cols":80,"rows":24}}}`,
		"SendInput": `{"process":{"pid":1000},"input":{"pty":"aGkK"}}`,
	} {
		_, b := unary(t, srv, "process.Process/"+method, body)
		if code, msg := connectErrorCode(t, b); code != "failed_precondition" || !strings.Contains(msg, "without a pty") {
			t.Errorf("%s: %s", method, b)
		}
	}
	// An Update without a pty changes nothing.
	if status, b := unary(t, srv, "process.Process/Update", `{"process":{"pid":1000}}`); status != http.StatusOK {
		t.Errorf("Update without pty: HTTP %d %s", status, b)
	}
	status, body := unary(t, srv, "process.Process/SendSignal", `{"process":{"pid":1000},"signal":"SIGNAL_SIGKILL"}`)
	if status != http.StatusOK {
		t.Fatalf("SendSignal: %d %s", status, body)
	}
	endStreamCode(t, r)
}

func TestFilesystemRPCs(t *testing.T) {
	fb := newFakeBackend(t)
	fb.put("/home/user/a.txt", "0123456789")
	fb.put("/home/user/sub/deep/x.py", "print(1)")
	srv, _ := startEnvd(t, fb)

	aTxt := `{"name":"a.txt","type":"FILE_TYPE_FILE","path":"/home/user/a.txt","size":"10","mode":420,"permissions":"-rw-r--r--","modifiedTime":"2023-11-14T22:13:20Z"}`
	sub := `{"name":"sub","type":"FILE_TYPE_DIRECTORY","path":"/home/user/sub","size":"4096","mode":493,"permissions":"drwxr-xr-x","modifiedTime":"2023-11-14T22:13:20Z"}`
	deep := `{"name":"deep","type":"FILE_TYPE_DIRECTORY","path":"/home/user/sub/deep","size":"4096","mode":493,"permissions":"drwxr-xr-x","modifiedTime":"2023-11-14T22:13:20Z"}`
	xPy := `{"name":"x.py","type":"FILE_TYPE_FILE","path":"/home/user/sub/deep/x.py","size":"8","mode":420,"permissions":"-rw-r--r--","modifiedTime":"2023-11-14T22:13:20Z"}`

	// files.list, as in §9's trace.
	status, b := unary(t, srv, "filesystem.Filesystem/ListDir", `{"path":"/home/user","depth":1}`)
	if status != http.StatusOK {
		t.Fatalf("ListDir: %d %s", status, b)
	}
	jsonEqual(t, b, `{"entries":[`+aTxt+`,`+sub+`]}`)
	// Deeper, depth first in name order; relative and ~ paths are in the
	// home directory.
	status, b = unary(t, srv, "filesystem.Filesystem/ListDir", `{"path":"~","depth":3}`)
	if status != http.StatusOK {
		t.Fatalf("ListDir depth 3: %d %s", status, b)
	}
	jsonEqual(t, b, `{"entries":[`+aTxt+`,`+sub+`,`+deep+`,`+xPy+`]}`)
	status, b = unary(t, srv, "filesystem.Filesystem/ListDir", `{"path":"sub","depth":2}`)
	if status != http.StatusOK {
		t.Fatalf("ListDir sub: %d %s", status, b)
	}
	jsonEqual(t, b, `{"entries":[`+deep+`,`+xPy+`]}`)
	status, b = unary(t, srv, "filesystem.Filesystem/ListDir", `{"path":"/home/user/a.txt"}`)
	if code, _ := connectErrorCode(t, b); status != http.StatusBadRequest || code != "invalid_argument" {
		t.Errorf("ListDir of a file: %d %s", status, b)
	}

	// files.exists / getInfo.
	status, b = unary(t, srv, "filesystem.Filesystem/Stat", `{"path":"a.txt"}`)
	if status != http.StatusOK {
		t.Fatalf("Stat: %d %s", status, b)
	}
	jsonEqual(t, b, `{"entry":`+aTxt+`}`)
	status, b = unary(t, srv, "filesystem.Filesystem/Stat", `{"path":"/home/user/nope"}`)
	if code, _ := connectErrorCode(t, b); status != http.StatusNotFound || code != "not_found" {
		t.Errorf("Stat of a missing path: %d %s, want 404 not_found", status, b)
	}
	status, b = unary(t, srv, "filesystem.Filesystem/Stat", `{"path":"/nodir/nope"}`)
	if code, _ := connectErrorCode(t, b); status != http.StatusNotFound || code != "not_found" {
		t.Errorf("Stat under a missing directory: %d %s, want 404 not_found", status, b)
	}
	status, b = unary(t, srv, "filesystem.Filesystem/Stat", `{"path":"/"}`)
	if status != http.StatusOK {
		t.Fatalf("Stat /: %d %s", status, b)
	}
	jsonEqual(t, b, `{"entry":{"name":"/","type":"FILE_TYPE_DIRECTORY","path":"/","mode":493,"permissions":"drwxr-xr-x"}}`)

	// files.makeDir: made with its parents, then already_exists (the SDK
	// returns false); a file in the way is invalid_argument.
	status, b = unary(t, srv, "filesystem.Filesystem/MakeDir", `{"path":"/home/user/new/inner"}`)
	if status != http.StatusOK {
		t.Fatalf("MakeDir: %d %s", status, b)
	}
	jsonEqual(t, b, `{"entry":{"name":"inner","type":"FILE_TYPE_DIRECTORY","path":"/home/user/new/inner","size":"4096","mode":493,"permissions":"drwxr-xr-x","modifiedTime":"2023-11-14T22:13:20Z"}}`)
	if !fb.isDir("/home/user/new/inner") {
		t.Error("MakeDir made no directory")
	}
	status, b = unary(t, srv, "filesystem.Filesystem/MakeDir", `{"path":"/home/user/new/inner"}`)
	if code, _ := connectErrorCode(t, b); status != http.StatusConflict || code != "already_exists" {
		t.Errorf("MakeDir twice: %d %s, want 409 already_exists", status, b)
	}
	status, b = unary(t, srv, "filesystem.Filesystem/MakeDir", `{"path":"/home/user/a.txt"}`)
	if code, _ := connectErrorCode(t, b); status != http.StatusBadRequest || code != "invalid_argument" {
		t.Errorf("MakeDir over a file: %d %s", status, b)
	}
	status, b = unary(t, srv, "filesystem.Filesystem/MakeDir", `{"path":"/home/user/a.txt/below"}`)
	if code, msg := connectErrorCode(t, b); status != http.StatusBadRequest || code != "invalid_argument" || !strings.Contains(strings.ToLower(msg), "not a directory") {
		t.Errorf("MakeDir below a file: %d %s", status, b)
	}

	// files.rename: into a directory that does not exist yet.
	status, b = unary(t, srv, "filesystem.Filesystem/Move", `{"source":"/home/user/a.txt","destination":"/home/user/moved/b.txt"}`)
	if status != http.StatusOK {
		t.Fatalf("Move: %d %s", status, b)
	}
	jsonEqual(t, b, `{"entry":`+strings.ReplaceAll(strings.ReplaceAll(aTxt, "a.txt", "b.txt"), "/home/user/b.txt", "/home/user/moved/b.txt")+`}`)
	if got, ok := fb.get("/home/user/moved/b.txt"); !ok || got != "0123456789" {
		t.Errorf("moved file: %q %v", got, ok)
	}
	if _, ok := fb.get("/home/user/a.txt"); ok {
		t.Error("the source is still there")
	}
	status, b = unary(t, srv, "filesystem.Filesystem/Move", `{"source":"/home/user/a.txt","destination":"/home/user/c.txt"}`)
	if code, _ := connectErrorCode(t, b); status != http.StatusNotFound || code != "not_found" {
		t.Errorf("Move of a missing source: %d %s", status, b)
	}

	// files.remove: recursive, and quiet about what is not there.
	status, b = unary(t, srv, "filesystem.Filesystem/Remove", `{"path":"/home/user/sub"}`)
	if status != http.StatusOK {
		t.Fatalf("Remove: %d %s", status, b)
	}
	jsonEqual(t, b, `{}`)
	if fb.isDir("/home/user/sub/deep") {
		t.Error("Remove left the subtree")
	}
	status, b = unary(t, srv, "filesystem.Filesystem/Remove", `{"path":"/home/user/sub"}`)
	if status != http.StatusOK {
		t.Errorf("Remove of a missing path: %d %s", status, b)
	}
	status, b = unary(t, srv, "filesystem.Filesystem/Remove", `{"path":""}`)
	if code, _ := connectErrorCode(t, b); status != http.StatusBadRequest || code != "invalid_argument" {
		t.Errorf("Remove of no path: %d %s", status, b)
	}

	// Watches are not served, and say so.
	status, b = unary(t, srv, "filesystem.Filesystem/CreateWatcher", `{"path":"/x","recursive":true}`)
	if code, msg := connectErrorCode(t, b); status != http.StatusNotImplemented || code != "unimplemented" || !strings.Contains(msg, "watch") {
		t.Errorf("CreateWatcher: %d %s", status, b)
	}

	// Another user than 'user' is refused with a reason.
	status, b = unary(t, srv, "filesystem.Filesystem/Stat", `{"path":"/"}`,
		"Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
	if code, msg := connectErrorCode(t, b); status != http.StatusForbidden || code != "permission_denied" ||
		!strings.Contains(msg, "forkbox runs sandbox code as 'user' only") {
		t.Errorf("as root: %d %s", status, b)
	}
}

// TestProtoJSONTolerance checks that requests with fields this schema does
// not know, or with nulls, are accepted.
func TestProtoJSONTolerance(t *testing.T) {
	fb := newFakeBackend(t)
	fb.put("/home/user/a.txt", "x")
	srv, _ := startEnvd(t, fb)
	status, b := unary(t, srv, "filesystem.Filesystem/ListDir", `{"path":"/home/user","depth":1,"some_future_field":true}`)
	if status != http.StatusOK || !bytes.Contains(b, []byte(`"a.txt"`)) {
		t.Errorf("unknown field: %d %s", status, b)
	}
	fb.run = func(ctx context.Context, req *api.ExecRequest, opts sandbox.ExecOptions) (*api.ExecResult, error) {
		return &api.ExecResult{}, nil
	}
	_, r := startStream(t, srv, `{"process":{"cmd":"ls","args":[]},"tag":null,"pty":null}`)
	if msgs, _ := allFrames(t, r); len(msgs) != 2 {
		t.Errorf("Start with nulls: %q", msgs)
	}
}

// multipartBody is what the SDKs' files.write sends: parts named "file"
// whose filename is the target path.
func multipartBody(t *testing.T, parts map[string]string) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	names := make([]string, 0, len(parts))
	for n := range parts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, n))
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, parts[n])
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), buf.Bytes()
}

func doREST(t *testing.T, srv *httptest.Server, method, target, ctype string, body []byte, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("E2b-Sandbox-Port", EnvdPort)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestFilesREST(t *testing.T) {
	fb := newFakeBackend(t)
	srv, _ := startEnvd(t, fb)

	// files.write('/home/user/data.csv', …), as in §9's trace.
	ct, body := multipartBody(t, map[string]string{"/home/user/data.csv": "a,b\n1,2\n"})
	resp, b := doREST(t, srv, http.MethodPost, "/files?path=%2Fhome%2Fuser%2Fdata.csv", ct, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /files: %d %s", resp.StatusCode, b)
	}
	jsonEqual(t, b, `[{"name":"data.csv","type":"file","path":"/home/user/data.csv"}]`)
	if got, _ := fb.get("/home/user/data.csv"); got != "a,b\n1,2\n" {
		t.Errorf("written %q", got)
	}
	if m := fb.mode("/home/user/data.csv"); m != 0o644 {
		t.Errorf("mode %o", m)
	}

	// write([{path, data}, …]): no ?path=, each part's filename is its
	// path (a relative one is in the home directory).
	ct, body = multipartBody(t, map[string]string{"/tmp/deep/one.txt": "1", "two.txt": "22"})
	resp, b = doREST(t, srv, http.MethodPost, "/files", ct, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /files (2 parts): %d %s", resp.StatusCode, b)
	}
	jsonEqual(t, b, `[{"name":"one.txt","type":"file","path":"/tmp/deep/one.txt"},{"name":"two.txt","type":"file","path":"/home/user/two.txt"}]`)
	if got, _ := fb.get("/tmp/deep/one.txt"); got != "1" {
		t.Errorf("one.txt %q", got)
	}
	if got, _ := fb.get("/home/user/two.txt"); got != "22" {
		t.Errorf("two.txt %q", got)
	}

	// useOctetStream with gzip.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, "compressed payload")
	zw.Close()
	resp, b = doREST(t, srv, http.MethodPost, "/files?path=~/z.bin", "application/octet-stream", gz.Bytes(), "Content-Encoding", "gzip")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /files (gzip): %d %s", resp.StatusCode, b)
	}
	jsonEqual(t, b, `[{"name":"z.bin","type":"file","path":"/home/user/z.bin"}]`)
	if got, _ := fb.get("/home/user/z.bin"); got != "compressed payload" {
		t.Errorf("z.bin %q", got)
	}
	resp, b = doREST(t, srv, http.MethodPost, "/files", "application/octet-stream", []byte("x"))
	jsonEqual(t, b, `{"code":400,"message":"path is required (?path=) for a body that is not multipart/form-data"}`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("octet-stream without path: %d", resp.StatusCode)
	}
	resp, b = doREST(t, srv, http.MethodPost, "/files?path=/home/user", "application/octet-stream", []byte("x"))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":400`) {
		t.Errorf("write over a directory: %d %s", resp.StatusCode, b)
	}

	// files.read.
	resp, b = doREST(t, srv, http.MethodGet, "/files?path=%2Fhome%2Fuser%2Fdata.csv", "", nil)
	if resp.StatusCode != http.StatusOK || string(b) != "a,b\n1,2\n" || resp.Header.Get("Content-Length") != "8" {
		t.Errorf("GET /files: %d %q, Content-Length %q", resp.StatusCode, b, resp.Header.Get("Content-Length"))
	}
	resp, b = doREST(t, srv, http.MethodGet, "/files?path=data.csv&username=user", "", nil)
	if resp.StatusCode != http.StatusOK || string(b) != "a,b\n1,2\n" {
		t.Errorf("GET /files relative: %d %q", resp.StatusCode, b)
	}
	resp, b = doREST(t, srv, http.MethodGet, "/files?path=/home/user/nope", "", nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET missing: %d", resp.StatusCode)
	}
	jsonEqual(t, b, `{"code":404,"message":"path '/home/user/nope' does not exist"}`)
	resp, b = doREST(t, srv, http.MethodGet, "/files?path=/home/user", "", nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "is a directory") {
		t.Errorf("GET a directory: %d %s", resp.StatusCode, b)
	}

	// Other users: 401 with the reason, on both routes.
	resp, b = doREST(t, srv, http.MethodGet, "/files?path=/etc/shadow&username=root", "", nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), "forkbox runs sandbox code as 'user' only") ||
		!strings.Contains(string(b), `"code":401`) {
		t.Errorf("GET as root: %d %s", resp.StatusCode, b)
	}
	ct, body = multipartBody(t, map[string]string{"/root/x": "x"})
	resp, b = doREST(t, srv, http.MethodPost, "/files", ct, body, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST as root: %d %s", resp.StatusCode, b)
	}
	if _, ok := fb.get("/root/x"); ok {
		t.Error("a refused upload was written")
	}
}

func TestHealthAndRouting(t *testing.T) {
	srv, _ := startEnvd(t, newFakeBackend(t))
	resp, b := doREST(t, srv, http.MethodGet, "/health", "", nil)
	if resp.StatusCode != http.StatusNoContent || len(b) != 0 {
		t.Errorf("GET /health: %d %q", resp.StatusCode, b)
	}
	resp, b = doREST(t, srv, http.MethodGet, "/nothing", "", nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"code":404`) {
		t.Errorf("unknown route: %d %s", resp.StatusCode, b)
	}

	// Without a sandbox in the context: 502, the SDKs' "sandbox is gone".
	bare := httptest.NewServer(newEnvd(newFakeBackend(t), slog.New(slog.NewTextHandler(io.Discard, nil))))
	defer bare.Close()
	for _, target := range []string{"/health", "/files?path=/x"} {
		r, err := bare.Client().Get(bare.URL + target)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), `"code":502`) {
			t.Errorf("%s without a sandbox: %d %s", target, r.StatusCode, b)
		}
	}
}

func TestResolvePath(t *testing.T) {
	for in, want := range map[string]string{
		"":                 "/home/user",
		"~":                "/home/user",
		"~/a/b":            "/home/user/a/b",
		"data.csv":         "/home/user/data.csv",
		"./x/../y":         "/home/user/y",
		"/tmp/a/":          "/tmp/a",
		"/home/user/../..": "/",
	} {
		got, err := resolvePath(in)
		if err != nil || got != want {
			t.Errorf("resolvePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := resolvePath("~root/x"); err == nil {
		t.Error("~root/x resolved")
	}
}

func TestEntryInfoModes(t *testing.T) {
	for _, c := range []struct {
		typ, mode string
		wantMode  uint32
		wantPerm  string
		ok        bool
	}{
		{"file", "0644", 0o644, "-rw-r--r--", true},
		{"file", "4755", 0o755, "urwxr-xr-x", true},
		{"dir", "1777", 0o777, "dtrwxrwxrwx", true},
		{"symlink", "0777", 0o777, "Lrwxrwxrwx", true},
		{"other", "0644", 0, "", false},
	} {
		ent, ok := entryInfo(&api.FileInfo{Name: "n", Path: "/n", Type: c.typ, Mode: c.mode})
		if ok != c.ok {
			t.Errorf("%s %s: ok %v", c.typ, c.mode, ok)
			continue
		}
		if ok && (ent.Mode != c.wantMode || ent.Permissions != c.wantPerm || ent.ModifiedTime != nil) {
			t.Errorf("%s %s: mode %o %q (time %v), want %o %q", c.typ, c.mode, ent.Mode, ent.Permissions, ent.ModifiedTime, c.wantMode, c.wantPerm)
		}
	}
}

// nextEvent reads a stream's next message, skipping keepalives.
func nextEvent(t *testing.T, r *bufio.Reader) []byte {
	t.Helper()
	for {
		f, err := readFrame(r)
		if err != nil {
			t.Fatal(err)
		}
		if f.flags != 0 {
			t.Fatalf("frame flags %#x: %s", f.flags, f.data)
		}
		if !bytes.Contains(f.data, []byte(`"keepalive"`)) {
			return f.data
		}
	}
}

// endStreamCode is the error code of a stream's end-stream frame ("" for
// none), read to the end.
func endStreamCode(t *testing.T, r *bufio.Reader) (msgs [][]byte, code string) {
	t.Helper()
	msgs, end := allFrames(t, r)
	var es struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(end, &es); err != nil {
		t.Fatal(err)
	}
	return msgs, es.Error.Code
}

// TestBackgroundProcess is the SDK's commands.run(cmd, {background: true,
// stdin: true}) whose client goes away: the command keeps running, List
// shows it, Connect follows it, SendInput reaches it, CloseStdin ends it.
func TestBackgroundProcess(t *testing.T) {
	fb := newFakeBackend(t)
	fb.run = fb.runLong
	srv, e := startEnvd(t, fb)
	e.keepalive = 20 * time.Millisecond

	resp, r := startStream(t, srv, `{"process":{"cmd":"/bin/bash","args":["-l","-c","cat"]},"tag":"bg","stdin":true}`)
	jsonEqual(t, nextEvent(t, r), `{"event":{"start":{"pid":1000}}}`)
	resp.Body.Close() // the client goes away

	status, body := unary(t, srv, "process.Process/List", `{}`)
	if status != http.StatusOK {
		t.Fatalf("List: %d %s", status, body)
	}
	jsonEqual(t, body, `{"processes":[{"config":{"cmd":"/bin/bash","args":["-l","-c","cat"],"cwd":"/home/user"},"pid":1000,"tag":"bg"}]}`)

	_, c1 := rpcStream(t, srv, "process.Process/Connect", `{"process":{"pid":1000}}`)
	jsonEqual(t, nextEvent(t, c1), `{"event":{"start":{"pid":1000}}}`)
	_, c2 := rpcStream(t, srv, "process.Process/Connect", `{"process":{"tag":"bg"}}`)
	jsonEqual(t, nextEvent(t, c2), `{"event":{"start":{"pid":1000}}}`)

	status, body = unary(t, srv, "process.Process/SendInput", `{"process":{"pid":1000},"input":{"stdin":"`+b64("hello\n")+`"}}`)
	if status != http.StatusOK {
		t.Fatalf("SendInput: %d %s", status, body)
	}
	jsonEqual(t, body, `{}`)
	for _, c := range []*bufio.Reader{c1, c2} {
		jsonEqual(t, nextEvent(t, c), `{"event":{"data":{"stdout":"`+b64("got:hello\n")+`"}}}`)
	}

	status, body = unary(t, srv, "process.Process/CloseStdin", `{"process":{"pid":1000}}`)
	if status != http.StatusOK {
		t.Fatalf("CloseStdin: %d %s", status, body)
	}
	for _, c := range []*bufio.Reader{c1, c2} {
		msgs, code := endStreamCode(t, c)
		if code != "" || len(msgs) == 0 {
			t.Fatalf("Connect ended %q, code %q", msgs, code)
		}
		jsonEqual(t, msgs[len(msgs)-1], `{"event":{"end":{"exited":true,"status":"exit status 0"}}}`)
	}

	// Gone once it ended.
	status, body = unary(t, srv, "process.Process/List", `{}`)
	if status != http.StatusOK {
		t.Fatalf("List: %d %s", status, body)
	}
	jsonEqual(t, body, `{}`)
	for method, body := range map[string]string{
		"SendSignal": `{"process":{"pid":1000},"signal":"SIGNAL_SIGKILL"}`,
		"SendInput":  `{"process":{"pid":1000},"input":{"stdin":"aGkK"}}`,
		"CloseStdin": `{"process":{"pid":1000}}`,
	} {
		status, b := unary(t, srv, "process.Process/"+method, body)
		if code, _ := connectErrorCode(t, b); status != http.StatusNotFound || code != "not_found" {
			t.Errorf("%s after the end: HTTP %d %s", method, status, b)
		}
	}
	_, c := rpcStream(t, srv, "process.Process/Connect", `{"process":{"pid":1000}}`)
	if msgs, code := endStreamCode(t, c); len(msgs) != 0 || code != "not_found" {
		t.Errorf("Connect after the end: %q, code %q", msgs, code)
	}
}

// TestBackgroundKill is commands.kill: SIGKILL ends the command (its Start
// stream gets the end), a second kill finds nothing (the SDK's false).
func TestBackgroundKill(t *testing.T) {
	fb := newFakeBackend(t)
	fb.run = fb.runLong
	srv, _ := startEnvd(t, fb)

	_, r := startStream(t, srv, `{"process":{"cmd":"/bin/bash","args":["-l","-c","sleep 100"]}}`)
	jsonEqual(t, nextEvent(t, r), `{"event":{"start":{"pid":1000}}}`)

	// Started without stdin: no input.
	status, body := unary(t, srv, "process.Process/SendInput", `{"process":{"pid":1000},"input":{"stdin":"aGkK"}}`)
	if code, _ := connectErrorCode(t, body); status != http.StatusBadRequest || code != "failed_precondition" {
		t.Errorf("SendInput without stdin: HTTP %d %s", status, body)
	}
	status, body = unary(t, srv, "process.Process/SendSignal", `{"process":{"pid":1000},"signal":"SIGNAL_UNSPECIFIED"}`)
	if code, _ := connectErrorCode(t, body); status != http.StatusBadRequest || code != "invalid_argument" {
		t.Errorf("SendSignal without a signal: HTTP %d %s", status, body)
	}

	status, body = unary(t, srv, "process.Process/SendSignal", `{"process":{"pid":1000},"signal":"SIGNAL_SIGKILL"}`)
	if status != http.StatusOK {
		t.Fatalf("SendSignal: %d %s", status, body)
	}
	msgs, code := endStreamCode(t, r)
	if code != "" || len(msgs) == 0 {
		t.Fatalf("Start ended %q, code %q", msgs, code)
	}
	jsonEqual(t, msgs[len(msgs)-1], `{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}`)

	// The kill waited for the end: a second one finds nothing.
	status, body = unary(t, srv, "process.Process/SendSignal", `{"process":{"pid":1000},"signal":"SIGNAL_SIGKILL"}`)
	if code, _ := connectErrorCode(t, body); status != http.StatusNotFound || code != "not_found" {
		t.Errorf("second kill: HTTP %d %s", status, body)
	}
	status, body = unary(t, srv, "process.Process/List", `{}`)
	if status != http.StatusOK {
		t.Fatalf("List: %d %s", status, body)
	}
	jsonEqual(t, body, `{}`)

	// Unknown pids and tags.
	for method, body := range map[string]string{
		"SendSignal": `{"process":{"pid":4242},"signal":"SIGNAL_SIGTERM"}`,
		"SendInput":  `{"process":{"tag":"nope"},"input":{"stdin":"aGkK"}}`,
		"CloseStdin": `{"process":{"pid":4242}}`,
	} {
		status, b := unary(t, srv, "process.Process/"+method, body)
		if code, _ := connectErrorCode(t, b); status != http.StatusNotFound || code != "not_found" {
			t.Errorf("%s of an unknown process: HTTP %d %s", method, status, b)
		}
	}
	_, c := rpcStream(t, srv, "process.Process/Connect", `{"process":{"tag":"nope"}}`)
	if msgs, code := endStreamCode(t, c); len(msgs) != 0 || code != "not_found" {
		t.Errorf("Connect to an unknown tag: %q, code %q", msgs, code)
	}
}

// TestProcessLimit checks that a sandbox runs at most maxProcs commands.
func TestProcessLimit(t *testing.T) {
	fb := newFakeBackend(t)
	fb.run = fb.runLong
	srv, _ := startEnvd(t, fb)
	for i := 0; i < maxProcs; i++ {
		resp, r := startStream(t, srv, `{"process":{"cmd":"sleep"}}`)
		nextEvent(t, r)
		resp.Body.Close()
	}
	_, r := startStream(t, srv, `{"process":{"cmd":"sleep"}}`)
	if msgs, code := endStreamCode(t, r); len(msgs) != 0 || code != "resource_exhausted" {
		t.Errorf("one process too many: %q, code %q", msgs, code)
	}
	for pid := firstPID; pid < firstPID+maxProcs; pid++ {
		status, body := unary(t, srv, "process.Process/SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGKILL"}`, pid))
		if status != http.StatusOK {
			t.Fatalf("SendSignal %d: %d %s", pid, status, body)
		}
	}
}
