package kernel

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
