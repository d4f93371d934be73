package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// fakeDaemon speaks the daemon's wire format from memory, so the CLI tests
// run the real commands and the real client against a real HTTP server.
type fakeDaemon struct {
	mu        sync.Mutex
	sandboxes map[string]*api.Sandbox
	files     map[string][]byte // "sbx_1:/workspace/a.txt"
	modes     map[string]string
	lastReq   map[string]any
	contexts  map[string][]*api.Context // by sandbox id, in creation order
	snapshots []*api.Snapshot           // in creation order
	snapOpts  fakeSnapOpts
	pools     []*api.Pool // in creation order
	pages     int         // GET /v1/sandboxes requests
}

func newFakeDaemon(t *testing.T) (*fakeDaemon, string) {
	d := &fakeDaemon{sandboxes: map[string]*api.Sandbox{}, files: map[string][]byte{}, modes: map[string]string{},
		contexts: map[string][]*api.Context{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", d.create)
	mux.HandleFunc("GET /v1/sandboxes", d.list)
	mux.HandleFunc("DELETE /v1/sandboxes/{sb}", d.remove)
	mux.HandleFunc("POST /v1/sandboxes/{sb}/exec", d.exec)
	mux.HandleFunc("GET /v1/sandboxes/{sb}/files", d.readFile)
	mux.HandleFunc("PUT /v1/sandboxes/{sb}/files", d.writeFile)
	mux.HandleFunc("POST /v1/sandboxes/{sb}/code", d.runCode)
	mux.HandleFunc("POST /v1/sandboxes/{sb}/contexts", d.createContext)
	mux.HandleFunc("GET /v1/sandboxes/{sb}/contexts", d.listContexts)
	mux.HandleFunc("DELETE /v1/sandboxes/{sb}/contexts/{id}", d.contextAction)
	mux.HandleFunc("POST /v1/sandboxes/{sb}/contexts/{id}/{action}", d.contextAction)
	mux.HandleFunc("POST /v1/sandboxes/{sb}/checkpoint", d.checkpoint)
	mux.HandleFunc("POST /v1/sandboxes/{sb}/fork", d.fork)
	mux.HandleFunc("GET /v1/snapshots", d.listSnapshots)
	mux.HandleFunc("GET /v1/snapshots/{id}", d.snapshot)
	mux.HandleFunc("DELETE /v1/snapshots/{id}", d.snapshot)
	mux.HandleFunc("POST /v1/sandboxes/{sb}/suspend", d.suspend)
	mux.HandleFunc("POST /v1/sandboxes/{sb}/resume", d.resume)
	mux.HandleFunc("POST /v1/pools", d.createPool)
	mux.HandleFunc("GET /v1/pools", d.listPools)
	mux.HandleFunc("DELETE /v1/pools/{name}", d.deletePool)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return d, srv.URL
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func replyErr(w http.ResponseWriter, err error) {
	status, code := errdefs.HTTPStatus(err)
	reply(w, status, api.Error{Error: api.ErrorBody{Code: code, Message: err.Error()}})
}

func (d *fakeDaemon) lookup(w http.ResponseWriter, r *http.Request) *api.Sandbox {
	ref := r.PathValue("sb")
	for _, sb := range d.sandboxes {
		if sb.ID == ref || (sb.Name != "" && sb.Name == ref) {
			return sb
		}
	}
	replyErr(w, errdefs.NotFound("sandbox %q not found", ref))
	return nil
}

func (d *fakeDaemon) create(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	slow := bytes.Contains(body, []byte(`"snapshot_id"`)) || bytes.Contains(body, []byte(`"pool"`))
	if slow && !d.slowCall(r) { // a restore takes a while
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var raw map[string]any
	json.Unmarshal(body, &raw)
	d.lastReq = raw
	var req api.CreateSandboxRequest
	json.Unmarshal(body, &req)
	if req.SnapshotID != "" && d.findSnapshot(req.SnapshotID) < 0 {
		replyErr(w, errdefs.NotFound("snapshot %q not found", req.SnapshotID))
		return
	}
	if req.Pool != "" {
		p := d.findPool(req.Pool)
		if p == nil {
			replyErr(w, errdefs.NotFound("pool %q not found", req.Pool))
			return
		}
		req.SnapshotID = p.SnapshotID
		p.Ready = max(0, p.Ready-1)
	}
	// The host of issue 16: 2 CPUs, 23 GiB.
	if req.MemoryMB != nil && *req.MemoryMB > 23*1024 {
		replyErr(w, errdefs.InvalidArgument("memory_mb: %d is more than this host has (23552 MiB; at most 22016 for one sandbox)", *req.MemoryMB))
		return
	}
	if req.CPUs != nil && *req.CPUs > 2 {
		replyErr(w, errdefs.InvalidArgument("cpus: %v is more than this host has (2 CPUs; at most 2 for one sandbox)", *req.CPUs))
		return
	}
	id := fmt.Sprintf("sbx_%d", len(d.sandboxes)+1)
	sb := &api.Sandbox{ID: id, Name: req.Name, State: api.StateRunning, Image: "python", CPUs: 1, MemoryMB: 1024,
		CreatedAt: time.Now().Add(-90 * time.Second), Labels: req.Labels, SnapshotID: req.SnapshotID,
		AutoResume: req.AutoResume == nil || *req.AutoResume}
	if req.CPUs != nil {
		sb.CPUs = *req.CPUs
	}
	if req.MemoryMB != nil {
		sb.MemoryMB = *req.MemoryMB
	}
	d.sandboxes[id] = sb
	reply(w, 201, sb)
}

// list pages as the daemon does: limit (default 100) sandboxes after the
// cursor ("after-<id>"), terminated ones only with state=terminated or
// include_terminated=true. Other filters are not applied. lastReq's query
// leaves limit and cursor out; d.pages counts the requests.
func (d *fakeDaemon) list(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := r.URL.Query()
	d.pages++
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit == 0 {
		limit = 100
	}
	after := strings.TrimPrefix(q.Get("cursor"), "after-")
	state := api.SandboxState(q.Get("state"))
	all := q.Get("include_terminated") == "true"
	rest := url.Values{}
	for k, v := range q {
		if k != "limit" && k != "cursor" {
			rest[k] = v
		}
	}
	d.lastReq = map[string]any{"query": rest.Encode()}
	list := api.SandboxList{Sandboxes: []api.Sandbox{}}
	for i := 1; i <= len(d.sandboxes); i++ {
		sb := d.sandboxes[fmt.Sprintf("sbx_%d", i)]
		if after != "" {
			if sb.ID == after {
				after = ""
			}
			continue
		}
		if (state != "" && sb.State != state) || (state == "" && !all && sb.State == api.StateTerminated) {
			continue
		}
		if len(list.Sandboxes) == limit {
			list.NextCursor = "after-" + list.Sandboxes[limit-1].ID
			break
		}
		list.Sandboxes = append(list.Sandboxes, *sb)
	}
	reply(w, 200, list)
}

func (d *fakeDaemon) remove(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if sb := d.lookup(w, r); sb != nil {
		sb.State = api.StateTerminated
		reply(w, 200, sb)
	}
}

// exec understands a few commands: "echo" streams its args to stdout and
// "fail N" writes to stderr and exits N; "kill" dies of SIGKILL.
func (d *fakeDaemon) exec(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	sb := d.lookup(w, r)
	d.mu.Unlock()
	if sb == nil {
		return
	}
	var req api.ExecRequest
	json.NewDecoder(r.Body).Decode(&req)
	res := api.ExecResult{DurationMS: 5}
	var out, errOut string
	switch req.Cmd {
	case "echo":
		out = strings.Join(req.Args, " ") + "\n" + req.Stdin
	case "fail":
		errOut = "it broke\n"
		fmt.Sscan(req.Args[0], &res.ExitCode)
	case "kill":
		res.ExitCode, res.Signal = -1, "SIGKILL"
	}
	if r.Header.Get("Accept") != "text/event-stream" {
		res.Stdout, res.Stderr = out, errOut
		reply(w, 200, res)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(ev string, v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev, b)
		w.(http.Flusher).Flush()
	}
	if out != "" {
		send("stdout", api.OutputChunk{Data: out})
	}
	if errOut != "" {
		send("stderr", api.OutputChunk{Data: errOut})
	}
	send("exit", res)
}

func (d *fakeDaemon) key(r *http.Request) string {
	p := r.URL.Query().Get("path")
	if !strings.HasPrefix(p, "/") {
		p = "/workspace/" + p
	}
	return r.PathValue("sb") + ":" + filepath.Clean(p)
}

func (d *fakeDaemon) readFile(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.files[d.key(r)]
	if !ok {
		replyErr(w, errdefs.NotFound("%s: no such file", r.URL.Query().Get("path")))
		return
	}
	w.Write(b)
}

func (d *fakeDaemon) writeFile(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.key(r)
	d.files[k] = b
	d.modes[k] = r.URL.Query().Get("mode")
	_, p, _ := strings.Cut(k, ":")
	reply(w, 200, api.WriteFileResult{Path: p, Size: int64(len(b))})
}

// cli runs the client commands as main does, with the given stdin.
func cli(t *testing.T, url, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := &cobra.Command{Use: "forkbox", SilenceUsage: true, SilenceErrors: true}
	addClientFlags(root)
	root.AddCommand(clientCmds()...)
	var o, e bytes.Buffer
	root.SetOut(&o)
	root.SetErr(&e)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"--url", url}, args...))
	err = root.Execute()
	return o.String(), e.String(), err
}

func TestCLICreateAndList(t *testing.T) {
	d, url := newFakeDaemon(t)
	out, _, err := cli(t, url, "", "create", "--name", "box", "--cpus", "0.5", "--memory", "512", "--timeout", "10m",
		"--internet", "--env", "A=1", "--label", "team=data")
	if err != nil {
		t.Fatal(err)
	}
	if out != "sbx_1\n" {
		t.Errorf("create printed %q", out)
	}
	want := `{"allow_internet_access":true,"cpus":0.5,"env":{"A":"1"},"labels":{"team":"data"},"memory_mb":512,"name":"box","timeout_secs":600}`
	if got, _ := json.Marshal(d.lastReq); string(got) != want {
		t.Errorf("create sent %s\nwant %s", got, want)
	}
	if _, _, err := cli(t, url, "", "create", "--env", "novalue"); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
		t.Errorf("bad --env: %v", err)
	}

	out, _, err = cli(t, url, "", "ls", "--state", "running", "--label", "team=data")
	if err != nil {
		t.Fatal(err)
	}
	if q := d.lastReq["query"]; q != "label=team%3Adata&state=running" {
		t.Errorf("ls query = %v", q)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAME STATE IMAGE CPUS MEM AGE" ||
		strings.Join(strings.Fields(lines[1]), " ") != "sbx_1 box running python 0.5 512 MiB 1m" {
		t.Errorf("ls printed:\n%s", out)
	}

	out, _, err = cli(t, url, "", "--json", "ls")
	var list api.SandboxList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Sandboxes) != 1 {
		t.Errorf("ls --json: %v\n%s", err, out)
	}
}

func TestCLIExec(t *testing.T) {
	_, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")

	out, errOut, err := cli(t, url, "", "exec", "box", "--", "echo", "hello", "-n")
	if err != nil || out != "hello -n\n" || errOut != "" {
		t.Errorf("echo: out=%q err=%q %v", out, errOut, err)
	}
	out, _, err = cli(t, url, "piped\n", "exec", "-i", "box", "--", "echo", "in:")
	if err != nil || out != "in:\npiped\n" {
		t.Errorf("stdin: out=%q %v", out, err)
	}

	for _, noStream := range []bool{false, true} {
		args := []string{"exec", "box", "--", "fail", "3"}
		if noStream {
			args = []string{"exec", "--no-stream", "box", "--", "fail", "3"}
		}
		out, errOut, err = cli(t, url, "", args...)
		if exitCode(err) != 3 || errOut != "it broke\n" || out != "" {
			t.Errorf("noStream=%v: exit %d (%v) out=%q err=%q", noStream, exitCode(err), err, out, errOut)
		}
		if err.Error() != "command terminated with exit code 3" {
			t.Errorf("message = %q", err)
		}
	}

	out, _, err = cli(t, url, "", "--json", "exec", "box", "--", "fail", "4")
	var res api.ExecResult
	if exitCode(err) != 4 || json.Unmarshal([]byte(out), &res) != nil || res.Stderr != "it broke\n" {
		t.Errorf("--json: exit %d out=%q", exitCode(err), out)
	}

	_, _, err = cli(t, url, "", "exec", "box", "--", "kill")
	if exitCode(err) != 137 || err.Error() != "command was killed by SIGKILL" {
		t.Errorf("kill: exit %d (%v)", exitCode(err), err)
	}

	_, _, err = cli(t, url, "", "exec", "nope", "--", "echo")
	if exitCode(err) != 1 || !errors.Is(err, errdefs.ErrNotFound) || err.Error() != `sandbox "nope" not found; forkbox ls --all lists the sandboxes` {
		t.Errorf("missing sandbox: %v", err)
	}
	if _, _, err = cli(t, url, "", "exec", "box", "ls", "-la"); err == nil || !strings.Contains(err.Error(), "after --") {
		t.Errorf("flag-like arg without --: %v", err)
	}
	if _, _, err = cli(t, url, "", "exec", "box", "extra", "--", "ls"); err == nil {
		t.Error("two args before --: want error")
	}
}

func TestCLICopy(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")
	dir := t.TempDir()
	src := filepath.Join(dir, "run.sh")
	os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o755)

	_, errOut, err := cli(t, url, "", "cp", src, "box:bin/")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(d.files["box:/workspace/bin/run.sh"]); got != "#!/bin/sh\necho hi\n" || d.modes["box:/workspace/bin/run.sh"] != "0755" {
		t.Errorf("uploaded %q mode %q", got, d.modes["box:/workspace/bin/run.sh"])
	}
	if errOut != "copied 18 B to box:/workspace/bin/run.sh\n" {
		t.Errorf("upload summary %q", errOut)
	}

	if _, _, err := cli(t, url, "from stdin", "cp", "-", "box:/tmp/in.txt"); err != nil || string(d.files["box:/tmp/in.txt"]) != "from stdin" {
		t.Errorf("stdin upload: %v", err)
	}

	// Download into a directory, to a file, to stdout.
	if _, _, err := cli(t, url, "", "cp", "box:bin/run.sh", dir+"/out/"); err == nil {
		t.Error("download into a missing directory: want error")
	}
	os.Mkdir(filepath.Join(dir, "out"), 0o755)
	if _, _, err := cli(t, url, "", "cp", "box:bin/run.sh", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out", "run.sh")); string(b) != "#!/bin/sh\necho hi\n" {
		t.Errorf("downloaded %q", b)
	}
	out, _, err := cli(t, url, "", "cp", "box:/tmp/in.txt", "-")
	if err != nil || out != "from stdin" {
		t.Errorf("download to stdout: %q %v", out, err)
	}

	// A failed download leaves neither the target nor a temp file.
	target := filepath.Join(dir, "missing.txt")
	if _, _, err := cli(t, url, "", "cp", "box:missing.txt", target); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing remote file: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("dir after failed download: %v", ents)
	}

	for _, args := range [][]string{{src, "x"}, {"box:a", "box:b"}, {dir, "box:x"}, {"-", "box:dir/"}} {
		if _, _, err := cli(t, url, "", append([]string{"cp"}, args...)...); err == nil {
			t.Errorf("cp %q: want error", args)
		} else if args[0] == dir && !strings.Contains(err.Error(), "is a directory") {
			t.Errorf("cp dir: %v", err)
		}
	}
}

func TestCLIRemove(t *testing.T) {
	_, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "a")
	cli(t, url, "", "create")
	out, errOut, err := cli(t, url, "", "rm", "a", "nope", "sbx_2")
	if out != "sbx_1\nsbx_2\n" || errOut != "forkbox: sandbox \"nope\" not found; forkbox ls --all lists the sandboxes\n" {
		t.Errorf("out=%q err=%q", out, errOut)
	}
	if err == nil || err.Error() != "1 of 3 sandboxes not removed" {
		t.Errorf("err = %v", err)
	}
}

func TestCLIUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, _, err := cli(t, url, "", "ls")
	if err == nil || !strings.Contains(err.Error(), "cannot reach the forkbox daemon at "+url) {
		t.Errorf("err = %v", err)
	}
}

func TestParseCpArg(t *testing.T) {
	for in, want := range map[string]cpArg{
		"box:/a/b":       {"box", "/a/b"},
		"sbx_0a1b:data/": {"sbx_0a1b", "data/"},
		"box:":           {"box", ""},
		"file.txt":       {"", "file.txt"},
		"./a:b":          {"", "./a:b"},
		"/tmp/a:b":       {"", "/tmp/a:b"},
		"-":              {"", "-"},
		"we ird:x":       {"", "we ird:x"},
	} {
		if got := parseCpArg(in); got != want {
			t.Errorf("parseCpArg(%q) = %+v, want %+v", in, got, want)
		}
	}
}

func TestHumanFormats(t *testing.T) {
	now := time.Now()
	for _, c := range []struct{ got, want string }{
		{humanMiB(512), "512 MiB"}, {humanMiB(2048), "2 GiB"}, {humanMiB(1536), "1.5 GiB"}, {humanMiB(0), "-"},
		{humanAge(now, now.Add(-30*time.Second)), "30s"}, {humanAge(now, now.Add(-5*time.Hour)), "5h"},
		{humanAge(now, now.Add(-72*time.Hour)), "3d"}, {humanAge(now, time.Time{}), "-"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	var s secondsFlag
	for in, want := range map[string]float64{"90": 90, "1.5": 1.5, "10m": 600, "500ms": 0.5} {
		if err := s.Set(in); err != nil || s.secs != want {
			t.Errorf("Set(%q) = %v, %v", in, s.secs, err)
		}
	}
	if wholeSeconds(0.5) != 1 || wholeSeconds(600) != 600 {
		t.Error("wholeSeconds")
	}
}

// context returns the context of sandbox sb with this id ("" is the default
// one, created on first use), or nil.
func (d *fakeDaemon) context(sb, id string) *api.Context {
	for _, c := range d.contexts[sb] {
		if c.ID == id || (id == "" && c.Default) {
			return c
		}
	}
	if id != "" {
		return nil
	}
	c := &api.Context{ID: "py0", Language: "python", Kernel: "python3", Cwd: "/workspace", Default: true, State: "idle",
		CreatedAt: time.Now().Add(-5 * time.Minute)}
	d.contexts[sb] = append(d.contexts[sb], c)
	return c
}

// fakePNG is the "image" of a plot cell.
var fakePNG = []byte("\x89PNG fake figure")

// runCode runs a tiny language, one statement a line: "print X" and
// "write X" (no newline) to stdout, "warn X" to stderr, "value X" (the main
// result), "display X", "html X", "plot" (png + text), "svg", "jpeg",
// "raise NAME: VALUE", "timeout" (TimeoutError without traceback), "die",
// the call failing (before or after the stream started), and "hang", a cell
// that runs until the client goes away.
func (d *fakeDaemon) runCode(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req api.RunCodeRequest
	json.Unmarshal(body, &req)
	d.mu.Lock()
	sb := d.lookup(w, r)
	var cx *api.Context
	if sb != nil {
		d.lastReq = nil
		json.Unmarshal(body, &d.lastReq)
		if cx = d.context(sb.ID, req.Context); cx == nil {
			replyErr(w, errdefs.NotFound("context %q not found", req.Context))
		} else {
			cx.ExecutionCount++
		}
	}
	d.mu.Unlock()
	if cx == nil {
		return
	}
	exec := api.Execution{Logs: api.Logs{Stdout: []string{}, Stderr: []string{}}, Results: []map[string]any{},
		ExecutionCount: cx.ExecutionCount, ContextID: cx.ID, DurationMS: 3}
	type event struct {
		name string
		v    any
	}
	var events []event
	result := func(m map[string]any) {
		exec.Results = append(exec.Results, m)
		events = append(events, event{"result", m})
	}
	png := base64.StdEncoding.EncodeToString(fakePNG)
	die, hang := false, false
lines:
	for _, line := range strings.Split(req.Code, "\n") {
		verb, arg, _ := strings.Cut(line, " ")
		switch verb {
		case "print", "write":
			if verb == "print" {
				arg += "\n"
			}
			exec.Logs.Stdout = append(exec.Logs.Stdout, arg)
			events = append(events, event{"stdout", api.OutputChunk{Data: arg}})
		case "warn":
			exec.Logs.Stderr = append(exec.Logs.Stderr, arg+"\n")
			events = append(events, event{"stderr", api.OutputChunk{Data: arg + "\n"}})
		case "value":
			result(map[string]any{"text": arg, "is_main_result": true})
		case "display":
			result(map[string]any{"text": arg})
		case "html":
			result(map[string]any{"html": arg})
		case "plot":
			result(map[string]any{"png": png, "text": "<Figure size 640x480 with 1 Axes>"})
		case "svg":
			result(map[string]any{"svg": "<svg/>"})
		case "jpeg":
			result(map[string]any{"jpeg": base64.RawStdEncoding.EncodeToString([]byte("JFIF"))})
		case "raise", "timeout":
			name, value, _ := strings.Cut(arg, ": ")
			e := &api.ExecutionError{Name: name, Value: value, Traceback: []string{
				"Traceback (most recent call last):", fmt.Sprintf("  Cell In[%d], line 1", exec.ExecutionCount), arg}}
			if verb == "timeout" {
				e = &api.ExecutionError{Name: "TimeoutError", Value: "cell timed out after 100 ms", Traceback: []string{}}
			}
			exec.Error = e
			events = append(events, event{"error", e})
			break lines
		case "die":
			die = true
			break lines
		case "hang":
			hang = true
			break lines
		}
	}
	if die && (len(events) == 0 || r.Header.Get("Accept") != "text/event-stream") {
		replyErr(w, errdefs.Unavailable("sandbox agent is not answering"))
		return
	}
	if r.Header.Get("Accept") != "text/event-stream" {
		reply(w, 200, exec)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(ev string, v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev, b)
		w.(http.Flusher).Flush()
	}
	for _, ev := range events {
		send(ev.name, ev.v)
	}
	if hang {
		<-r.Context().Done()
		return
	}
	if die {
		send("failure", api.ErrorBody{Code: "unavailable", Message: "sandbox agent went away"})
		return
	}
	send("done", exec)
}

func (d *fakeDaemon) createContext(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sb := d.lookup(w, r)
	if sb == nil {
		return
	}
	body, _ := io.ReadAll(r.Body)
	d.lastReq = nil
	json.Unmarshal(body, &d.lastReq)
	var req api.CreateContextRequest
	json.Unmarshal(body, &req)
	c := &api.Context{ID: fmt.Sprintf("ctx_%d", len(d.contexts[sb.ID])+1), Language: "python", Kernel: "python3",
		Cwd: "/workspace", State: "idle", CreatedAt: time.Now().Add(-time.Minute)}
	if req.Cwd != "" {
		c.Cwd = req.Cwd
	}
	if req.Language != "" {
		c.Language, c.Kernel = req.Language, req.Language
	}
	d.contexts[sb.ID] = append(d.contexts[sb.ID], c)
	reply(w, 201, c)
}

func (d *fakeDaemon) listContexts(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if sb := d.lookup(w, r); sb != nil {
		list := api.ContextList{Contexts: []api.Context{}}
		for _, c := range d.contexts[sb.ID] {
			list.Contexts = append(list.Contexts, *c)
		}
		reply(w, 200, list)
	}
}

func (d *fakeDaemon) contextAction(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sb := d.lookup(w, r)
	if sb == nil {
		return
	}
	id := r.PathValue("id")
	c := d.context(sb.ID, id)
	if c == nil {
		replyErr(w, errdefs.NotFound("context %q not found", id))
		return
	}
	switch r.PathValue("action") {
	case "":
		cs := d.contexts[sb.ID]
		for i := range cs {
			if cs[i] == c {
				d.contexts[sb.ID] = append(cs[:i:i], cs[i+1:]...)
				break
			}
		}
		w.WriteHeader(204)
	case "interrupt":
		c.State = "idle"
		reply(w, 200, c)
	case "restart":
		c.ExecutionCount = 0
		reply(w, 200, c)
	default:
		replyErr(w, errdefs.NotFound("no route"))
	}
}

func TestCLIRun(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")

	out, errOut, err := cli(t, url, "", "run", "box", "print hello\nwarn careful\nvalue 215")
	if err != nil || out != "hello\n215\n" || errOut != "careful\n" {
		t.Errorf("run: out=%q err=%q %v", out, errOut, err)
	}
	if got, _ := json.Marshal(d.lastReq); string(got) != `{"code":"print hello\nwarn careful\nvalue 215"}` {
		t.Errorf("sent %s", got)
	}

	// Flags become the request; a result after a partial line starts a new one.
	out, _, err = cli(t, url, "", "run", "-c", "py0", "-l", "python", "--timeout", "1.5s", "-e", "A=1", "box", "write 3 + 2 =\nvalue 5")
	if err != nil || out != "3 + 2 =\n5\n" {
		t.Errorf("run with flags: out=%q %v", out, err)
	}
	want := `{"code":"write 3 + 2 =\nvalue 5","context":"py0","env":{"A":"1"},"language":"python","timeout_ms":1500}`
	if got, _ := json.Marshal(d.lastReq); string(got) != want {
		t.Errorf("sent %s\nwant %s", got, want)
	}

	// Results without text are named, not lost; display text is shown too.
	out, errOut, err = cli(t, url, "", "run", "box", "html <b>hi</b>\ndisplay shown")
	if err != nil || out != "shown\n" || errOut != "(html result not shown; --json prints it)\n" {
		t.Errorf("html: out=%q err=%q %v", out, errOut, err)
	}

	// The code from stdin ("-" or no CODE) and from -f FILE.
	for _, args := range [][]string{{"run", "box"}, {"run", "box", "-"}, {"run", "-f", "-", "box"}} {
		if out, _, err := cli(t, url, "value from stdin", args...); err != nil || out != "from stdin\n" {
			t.Errorf("%q: out=%q %v", args, out, err)
		}
	}
	file := filepath.Join(t.TempDir(), "cell.py")
	os.WriteFile(file, []byte("value from file"), 0o644)
	if out, _, err := cli(t, url, "", "run", "box", "-f", file); err != nil || out != "from file\n" {
		t.Errorf("-f: out=%q %v", out, err)
	}
	if _, _, err := cli(t, url, "", "run", "box", "-f", file, "value 1"); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("-f and CODE: %v", err)
	}
	if _, _, err := cli(t, url, "", "run", "box", "-f", file+".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("-f missing: %v", err)
	}

	// --json prints the whole execution.
	out, errOut, err = cli(t, url, "", "--json", "run", "box", "print hi\nvalue 215")
	var exec api.Execution
	if err != nil || errOut != "" || json.Unmarshal([]byte(out), &exec) != nil ||
		exec.Logs.Stdout[0] != "hi\n" || exec.Results[0]["text"] != "215" || exec.ExecutionCount == 0 || exec.ContextID != "py0" {
		t.Errorf("--json: out=%q err=%q %v", out, errOut, err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "name the SANDBOX"},
		{[]string{"run", "box", "a", "b"}, "at most one CODE"},
		{[]string{"run", "box", "--timeout", "0", "value 1"}, "--timeout must be positive"},
		{[]string{"run", "box", "-e", "oops", "value 1"}, "KEY=VALUE"},
		{[]string{"run", "nope", "value 1"}, `sandbox "nope" not found`},
		{[]string{"run", "-c", "ctx_9", "box", "value 1"}, `context "ctx_9" not found`},
	} {
		if _, _, err := cli(t, url, "", c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
}

func TestCLIRunNoCodeOnTerminal(t *testing.T) {
	// /dev/null is a character device, as a terminal is.
	tty, err := os.Open(os.DevNull)
	if err != nil {
		t.Skip(err)
	}
	defer tty.Close()
	cmd := &cobra.Command{}
	cmd.SetIn(tty)
	if _, err := readCode(cmd, nil, ""); err == nil || !strings.Contains(err.Error(), "no code to run") {
		t.Errorf("no CODE, terminal stdin: %v", err)
	}
	if code, err := readCode(cmd, []string{"-"}, ""); err != nil || code != "" { // "-" reads it anyway
		t.Errorf(`"-", terminal stdin: %q %v`, code, err)
	}
}

func TestCLIRunCellError(t *testing.T) {
	_, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")

	out, errOut, err := cli(t, url, "", "run", "box", "print before\nraise NameError: name 'x' is not defined\nprint after")
	if out != "before\n" || errOut != "Traceback (most recent call last):\n  Cell In[1], line 1\nNameError: name 'x' is not defined\n" {
		t.Errorf("out=%q err=%q", out, errOut)
	}
	if exitCode(err) != 1 || err.Error() != "cell failed with NameError" {
		t.Errorf("exit %d (%v)", exitCode(err), err)
	}

	_, errOut, err = cli(t, url, "", "run", "box", "timeout")
	if exitCode(err) != 1 || errOut != "TimeoutError: cell timed out after 100 ms\n" {
		t.Errorf("timeout: exit %d (%v) err=%q", exitCode(err), err, errOut)
	}

	out, errOut, err = cli(t, url, "", "--json", "run", "box", "raise ValueError: bad")
	var exec api.Execution
	if exitCode(err) != 1 || errOut != "" || json.Unmarshal([]byte(out), &exec) != nil || exec.Error == nil || exec.Error.Name != "ValueError" {
		t.Errorf("--json: exit %d out=%q err=%q", exitCode(err), out, errOut)
	}

	// The call failing is not a cell error: before the stream, and after.
	if _, _, err := cli(t, url, "", "run", "box", "die"); !errors.Is(err, errdefs.ErrUnavailable) || err.Error() != "sandbox agent is not answering" {
		t.Errorf("die before stream: %v", err)
	}
	out, _, err = cli(t, url, "", "run", "box", "print partial\ndie")
	if out != "partial\n" || !errors.Is(err, errdefs.ErrUnavailable) || err.Error() != "sandbox agent went away" {
		t.Errorf("die after stream: out=%q %v", out, err)
	}
}

func TestCLIRunImages(t *testing.T) {
	_, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")

	out, errOut, err := cli(t, url, "", "run", "box", "print drawing\nplot\nsvg\njpeg\nvalue done")
	if err != nil || out != "drawing\ndone\n" || errOut != "(3 images were not saved; use --out DIR to save images)\n" {
		t.Errorf("no --out: out=%q err=%q %v", out, errOut, err)
	}
	if _, errOut, _ := cli(t, url, "", "run", "box", "plot"); errOut != "(1 image was not saved; use --out DIR to save images)\n" {
		t.Errorf("one image: err=%q", errOut)
	}

	dir := filepath.Join(t.TempDir(), "plots") // created
	out, errOut, err = cli(t, url, "", "run", "box", "--out", dir, "plot\ndisplay table\nsvg\njpeg\nraise RuntimeError: after the plots")
	if exitCode(err) != 1 || out != "table\n" {
		t.Errorf("--out: exit %d out=%q", exitCode(err), out)
	}
	wantErr := "Traceback (most recent call last):\n  Cell In[3], line 1\nRuntimeError: after the plots\n" +
		"saved " + filepath.Join(dir, "3-1.png") + "\nsaved " + filepath.Join(dir, "3-2.svg") + "\nsaved " + filepath.Join(dir, "3-3.jpg") + "\n"
	if errOut != wantErr {
		t.Errorf("--out stderr:\n%s\nwant:\n%s", errOut, wantErr)
	}
	for name, want := range map[string]string{"3-1.png": string(fakePNG), "3-2.svg": "<svg/>", "3-3.jpg": "JFIF"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", name, b, err)
		}
	}

	// --json with --out: the JSON on stdout, the files saved, no note.
	out, errOut, err = cli(t, url, "", "--json", "run", "box", "--out", dir, "plot")
	var exec api.Execution
	if err != nil || json.Unmarshal([]byte(out), &exec) != nil || errOut != "saved "+filepath.Join(dir, "4-1.png")+"\n" {
		t.Errorf("--json --out: out=%q err=%q %v", out, errOut, err)
	}
	if _, errOut, _ := cli(t, url, "", "--json", "run", "box", "plot"); errOut != "" {
		t.Errorf("--json without --out: err=%q", errOut)
	}
}

func TestCLIContexts(t *testing.T) {
	d, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")
	cli(t, url, "", "run", "box", "value 1") // starts the default context

	out, _, err := cli(t, url, "", "context", "create", "box", "-l", "python", "--cwd", "/tmp", "-e", "A=1")
	if err != nil || out != "ctx_2\n" {
		t.Fatalf("create: out=%q %v", out, err)
	}
	if got, _ := json.Marshal(d.lastReq); string(got) != `{"cwd":"/tmp","env":{"A":"1"},"language":"python"}` {
		t.Errorf("create sent %s", got)
	}
	out, _, err = cli(t, url, "", "--json", "context", "create", "box")
	var cx api.Context
	if err != nil || json.Unmarshal([]byte(out), &cx) != nil || cx.ID != "ctx_3" {
		t.Errorf("create --json: out=%q %v", out, err)
	}

	for _, args := range [][]string{{"contexts", "box"}, {"context", "ls", "box"}} {
		out, _, err := cli(t, url, "", args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err != nil || len(lines) != 4 ||
			strings.Join(strings.Fields(lines[0]), " ") != "ID LANGUAGE KERNEL STATE CELLS CWD AGE" ||
			strings.Join(strings.Fields(lines[1]), " ") != "py0 (default) python python3 idle 1 /workspace 5m" ||
			strings.Join(strings.Fields(lines[2]), " ") != "ctx_2 python python idle 0 /tmp 1m" {
			t.Errorf("%q printed (%v):\n%s", args, err, out)
		}
	}
	out, _, err = cli(t, url, "", "--json", "contexts", "box")
	var list api.ContextList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Contexts) != 3 || !list.Contexts[0].Default {
		t.Errorf("contexts --json: out=%q %v", out, err)
	}

	if out, _, err := cli(t, url, "", "context", "interrupt", "box", "py0"); err != nil || out != "py0 idle\n" {
		t.Errorf("interrupt: out=%q %v", out, err)
	}
	out, _, err = cli(t, url, "", "--json", "context", "restart", "box", "py0")
	if err != nil || json.Unmarshal([]byte(out), &cx) != nil || cx.ID != "py0" || cx.ExecutionCount != 0 {
		t.Errorf("restart --json: out=%q %v", out, err)
	}

	out, errOut, err := cli(t, url, "", "context", "rm", "box", "ctx_2", "nope", "ctx_3")
	if out != "ctx_2\nctx_3\n" || errOut != "forkbox: context \"nope\" not found\n" || err == nil || err.Error() != "1 of 3 contexts not removed" {
		t.Errorf("rm: out=%q err=%q %v", out, errOut, err)
	}
	if _, _, err := cli(t, url, "", "context", "rm", "box", "ctx_2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("rm again: %v", err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"contexts"}, "name the SANDBOX"},
		{[]string{"context", "create"}, "name the SANDBOX"},
		{[]string{"context", "rm", "box"}, "at least one context ID"},
		{[]string{"context", "interrupt", "box"}, "want SANDBOX and a context ID"},
		{[]string{"context", "restart", "box", "a", "b"}, "want SANDBOX and a context ID"},
		{[]string{"context", "frob"}, "unknown command"},
		{[]string{"contexts", "nope"}, `sandbox "nope" not found`},
	} {
		if _, _, err := cli(t, url, "", c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
}

func TestCLIRunInterrupted(t *testing.T) {
	_, url := newFakeDaemon(t)
	cli(t, url, "", "create", "--name", "box")

	root := &cobra.Command{Use: "forkbox", SilenceUsage: true, SilenceErrors: true}
	addClientFlags(root)
	root.AddCommand(clientCmds()...)
	var e bytes.Buffer
	o := &signalWriter{wrote: make(chan struct{})}
	root.SetOut(o)
	root.SetErr(&e)
	root.SetArgs([]string{"--url", url, "run", "box", "print working\nhang"})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-o.wrote; cancel() }() // Ctrl-C once the cell has printed
	err := root.ExecuteContext(ctx)
	if exitCode(err) != 130 || o.String() != "working\n" || e.String() != "" {
		t.Errorf("exit %d (%v) out=%q err=%q", exitCode(err), err, o.String(), e.String())
	}
}

// signalWriter is a buffer that closes wrote at its first write.
type signalWriter struct {
	bytes.Buffer
	wrote chan struct{}
}

func (w *signalWriter) Write(b []byte) (int, error) {
	if w.Len() == 0 {
		close(w.wrote)
	}
	return w.Buffer.Write(b)
}

// WriteString shadows the Buffer's, which io.WriteString would call directly.
func (w *signalWriter) WriteString(s string) (int, error) { return w.Write([]byte(s)) }
