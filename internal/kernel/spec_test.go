package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

func writeSpec(t *testing.T, dir, name, body string) {
	t.Helper()
	d := filepath.Join(dir, "kernels", name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "kernel.json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFindSpecs(t *testing.T) {
	user, system := t.TempDir(), t.TempDir()
	writeSpec(t, user, "python3", `{"argv":["/home/py","-f","{connection_file}"],"display_name":"User Python","language":"python"}`)
	writeSpec(t, system, "python3", `{"argv":["/usr/bin/python3","-m","ipykernel_launcher","-f","{connection_file}"],"display_name":"Python 3","language":"python"}`)
	writeSpec(t, system, "IR", `{"argv":["R","--slave","{connection_file}"],"display_name":"R","language":"R","interrupt_mode":"message","env":{"A":"1"}}`)
	writeSpec(t, system, "broken", `{"argv":[]}`)
	specs, err := FindSpecs([]string{user, filepath.Join(t.TempDir(), "missing"), system})
	if err == nil || !strings.Contains(err.Error(), "empty argv") {
		t.Errorf("err = %v, want the broken spec reported", err)
	}
	if len(specs) != 2 {
		t.Fatalf("specs = %v", specs)
	}
	if py := specs["python3"]; py.DisplayName != "User Python" || py.InterruptMode != "signal" || py.Dir != filepath.Join(user, "kernels", "python3") {
		t.Errorf("python3 = %+v (earlier dirs win)", py)
	}
	if r := specs["ir"]; r == nil || r.Language != "R" || r.InterruptMode != "message" || r.Env["A"] != "1" {
		t.Errorf("ir = %+v", r)
	}

	for _, c := range []struct{ ask, want string }{{"python", "python3"}, {"python3", "python3"}, {"Python", "python3"}, {"", "python3"}, {"r", "ir"}, {"IR", "ir"}} {
		sp, err := Resolve(specs, c.ask)
		if err != nil || sp.Name != c.want {
			t.Errorf("Resolve(%q) = %v, %v; want %s", c.ask, sp, err, c.want)
		}
	}
	_, err = Resolve(specs, "julia")
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "python3 (python)") || !strings.Contains(err.Error(), "ir (R)") {
		t.Errorf("Resolve(julia) = %v", err)
	}
	if _, err := Resolve(nil, "python"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Resolve with no specs = %v", err)
	}
}

func TestResolvePrefersLanguageName(t *testing.T) {
	specs := map[string]*Spec{
		"conda-py": {Name: "conda-py", Language: "python"},
		"python3":  {Name: "python3", Language: "python"},
		"apy":      {Name: "apy", Language: "python"},
	}
	if sp, _ := Resolve(specs, "python"); sp.Name != "python3" {
		t.Errorf("got %s", sp.Name)
	}
	delete(specs, "python3")
	if sp, _ := Resolve(specs, "python"); sp.Name != "apy" {
		t.Errorf("got %s", sp.Name)
	}
}

func TestDefaultSpecDirs(t *testing.T) {
	got := DefaultSpecDirs("/home/user")
	want := []string{"/home/user/.local/share/jupyter", "/usr/local/share/jupyter", "/usr/share/jupyter"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("got %v", got)
	}
	if got := DefaultSpecDirs(""); len(got) != 2 {
		t.Errorf("no home: %v", got)
	}
}

func TestCommandForIPyKernel(t *testing.T) {
	k := &Kernel{o: Options{
		Spec: &Spec{Name: "python3", Dir: "/res", Argv: []string{"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}", "--res={resource_dir}"}, Env: map[string]string{"B": "spec", "A": "spec"}},
		Env:  []string{"B=opt", "MPLBACKEND=Agg"},
	}}
	argv, env := k.command("/run/k.json")
	if got := strings.Join(argv, " "); got != "/usr/bin/python3 -m ipykernel_launcher -f /run/k.json --res=/res --HistoryManager.enabled=False --InteractiveShell.colors=NoColor" {
		t.Errorf("argv = %s", got)
	}
	if got := strings.Join(env, " "); got != "A=spec B=opt MPLBACKEND=module://matplotlib_inline.backend_inline PYDEVD_DISABLE_FILE_VALIDATION=1" {
		t.Errorf("env = %s", got)
	}
	k.o.Spec = &Spec{Name: "ir", Argv: []string{"R", "{connection_file}"}}
	argv, env = k.command("/run/k.json")
	if strings.Join(argv, " ") != "R /run/k.json" || strings.Join(env, " ") != "B=opt MPLBACKEND=Agg" {
		t.Errorf("other kernels are left alone: %v %v", argv, env)
	}
}

func TestParseSpec(t *testing.T) {
	ok := `{"argv":["python3","-f","{connection_file}"],"language":"python","env":{"A":"1"}}`
	cases := []struct {
		name, dir, body, wantErr string
	}{
		{"valid", "/k/Python3", ok, ""},
		{"dots and dashes", "/k/py-3.11_x", ok, ""},
		{"space in the name", "/k/py 3", ok, "not a valid kernel name"},
		{"non-ASCII name", "/k/pÿ", ok, "not a valid kernel name"},
		{"not JSON", "/k/x", "root:$6$salt:19000:0:99999:7:::", "invalid JSON"},
		{"empty argv", "/k/x", `{"argv":[]}`, "empty argv"},
		{"empty program", "/k/x", `{"argv":[""]}`, "argv[0] is empty"},
		{"NUL in argv", "/k/x", `{"argv":["a\u0000b"]}`, "NUL"},
		{"= in an env name", "/k/x", `{"argv":["a"],"env":{"A=B":"1"}}`, "invalid env entry"},
		{"empty env name", "/k/x", `{"argv":["a"],"env":{"":"1"}}`, "invalid env entry"},
		{"bad interrupt_mode", "/k/x", `{"argv":["a"],"interrupt_mode":"carrier pigeon"}`, "unknown interrupt_mode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp, err := ParseSpec([]byte(c.body), c.dir)
			if c.wantErr == "" {
				if err != nil || sp.Name != strings.ToLower(filepath.Base(c.dir)) || sp.Dir != c.dir || sp.InterruptMode != "signal" {
					t.Fatalf("ParseSpec = %+v, %v", sp, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("ParseSpec = %+v, %v; want an error with %q", sp, err, c.wantErr)
			}
			// A spec that is not JSON is reported without its content.
			if strings.Contains(err.Error(), "$6$") {
				t.Fatalf("the error repeats the file's content: %v", err)
			}
		})
	}
}

// TestFindSpecsHostileEntries: what sandbox code can leave where kernelspecs
// are looked for is skipped with a reason, quickly, and the good specs are
// still found.
func TestFindSpecsHostileEntries(t *testing.T) {
	user, system := t.TempDir(), t.TempDir()
	writeSpec(t, system, "python3", `{"argv":["/usr/bin/python3","-f","{connection_file}"],"language":"python"}`)
	writeSpec(t, user, "good", `{"argv":["good"],"language":"good"}`)
	kernels := filepath.Join(user, "kernels")
	link := func(name, target string) {
		if err := os.MkdirAll(filepath.Join(kernels, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(kernels, name, "kernel.json")); err != nil {
			t.Fatal(err)
		}
	}
	link("zero", "/dev/zero") // before: read until the agent ran out of memory
	link("dangling", "/nonexistent/kernel.json")
	if err := os.MkdirAll(filepath.Join(kernels, "fifo"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(kernels, "fifo", "kernel.json"), 0o644); err != nil {
		t.Fatal(err) // before: open() waited for a writer forever
	}
	writeSpec(t, user, "big", `{"argv":["x"],"display_name":"`+strings.Repeat("x", MaxSpecSize)+`"}`)
	writeSpec(t, user, "Bad Name", `{"argv":["x"]}`)
	if err := os.WriteFile(filepath.Join(kernels, "plain-file"), []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A FIFO where a whole kernels directory should be.
	fifoDir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifoDir, "kernels"), 0o644); err != nil {
		t.Fatal(err)
	}

	type result struct {
		specs map[string]*Spec
		err   error
	}
	done := make(chan result, 1)
	go func() {
		specs, err := FindSpecs([]string{fifoDir, user, system})
		done <- result{specs, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("FindSpecs blocked")
	}
	if len(r.specs) != 2 || r.specs["good"] == nil || r.specs["python3"] == nil {
		t.Fatalf("specs = %v", r.specs)
	}
	if r.err == nil {
		t.Fatal("no problems reported")
	}
	msg := r.err.Error()
	for _, want := range []string{"zero/kernel.json: not a regular file but a character device", "fifo/kernel.json: not a regular file but a FIFO", "big/kernel.json: 65568 bytes, more than the 65536", `"Bad Name" is not a valid kernel name`} {
		if !strings.Contains(msg, want) {
			t.Errorf("problems %q lack %q", msg, want)
		}
	}
	for _, quiet := range []string{"dangling", "plain-file", fifoDir} {
		if strings.Contains(msg, quiet) {
			t.Errorf("problems %q mention %s, which is just absent", msg, quiet)
		}
	}
}

func TestFindSpecsEntryLimit(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < MaxSpecEntries+5; i++ {
		if err := os.MkdirAll(filepath.Join(dir, "kernels", fmt.Sprintf("k%04d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeSpec(t, dir, "k0000", `{"argv":["x"],"language":"x"}`)
	specs, err := FindSpecs([]string{dir})
	if len(specs) != 1 || err == nil || !strings.Contains(err.Error(), "the rest are skipped") {
		t.Fatalf("specs %v, err %v", specs, err)
	}
}
