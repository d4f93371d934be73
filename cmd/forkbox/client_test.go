package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
}

func newFakeDaemon(t *testing.T) (*fakeDaemon, string) {
	d := &fakeDaemon{sandboxes: map[string]*api.Sandbox{}, files: map[string][]byte{}, modes: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", d.create)
	mux.HandleFunc("GET /v1/sandboxes", d.list)
	mux.HandleFunc("DELETE /v1/sandboxes/{sb}", d.remove)
	mux.HandleFunc("POST /v1/sandboxes/{sb}/exec", d.exec)
	mux.HandleFunc("GET /v1/sandboxes/{sb}/files", d.readFile)
	mux.HandleFunc("PUT /v1/sandboxes/{sb}/files", d.writeFile)
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
	d.mu.Lock()
	defer d.mu.Unlock()
	var raw map[string]any
	body, _ := io.ReadAll(r.Body)
	json.Unmarshal(body, &raw)
	d.lastReq = raw
	var req api.CreateSandboxRequest
	json.Unmarshal(body, &req)
	id := fmt.Sprintf("sbx_%d", len(d.sandboxes)+1)
	sb := &api.Sandbox{ID: id, Name: req.Name, State: api.StateRunning, Image: "python", CPUs: 1, MemoryMB: 1024,
		CreatedAt: time.Now().Add(-90 * time.Second), Labels: req.Labels}
	if req.CPUs != nil {
		sb.CPUs = *req.CPUs
	}
	if req.MemoryMB != nil {
		sb.MemoryMB = *req.MemoryMB
	}
	d.sandboxes[id] = sb
	reply(w, 201, sb)
}

func (d *fakeDaemon) list(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastReq = map[string]any{"query": r.URL.RawQuery}
	list := api.SandboxList{Sandboxes: []api.Sandbox{}}
	for i := 1; i <= len(d.sandboxes); i++ {
		list.Sandboxes = append(list.Sandboxes, *d.sandboxes[fmt.Sprintf("sbx_%d", i)])
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
		strings.Join(strings.Fields(lines[1]), " ") != "sbx_1 box running python 0.5 512M 1m" {
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
	if exitCode(err) != 1 || !errors.Is(err, errdefs.ErrNotFound) || err.Error() != `sandbox "nope" not found` {
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
	if out != "sbx_1\nsbx_2\n" || errOut != "forkbox: nope: sandbox \"nope\" not found\n" {
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
		{humanMB(512), "512M"}, {humanMB(2048), "2G"}, {humanMB(1536), "1.5G"}, {humanMB(0), "-"},
		{humanAge(now, now.Add(-30*time.Second)), "30s"}, {humanAge(now, now.Add(-5*time.Hour)), "5h"},
		{humanAge(now, now.Add(-72*time.Hour)), "3d"}, {humanAge(now, time.Time{}), "-"},
		{humanBytes(18), "18 B"}, {humanBytes(1536), "1.5 KiB"}, {humanBytes(50 << 20), "50.0 MiB"},
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
