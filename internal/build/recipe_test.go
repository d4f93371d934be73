package build

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/images"
	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestParseRecipe(t *testing.T) {
	yaml := `
name: demo
base: python
steps:
  - run: echo hi
  - env: {A: "1", B: two}
  - workdir: /srv
  - user: user
  - copy: {src: lib, dest: /opt/lib}
`
	r, err := ParseRecipe([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "demo" || r.Base != "python" || len(r.Steps) != 5 || r.Steps[0].Run != "echo hi" ||
		r.Steps[1].Env["B"] != "two" || r.Steps[2].Workdir != "/srv" || r.Steps[3].User != "user" ||
		r.Steps[4].Copy.Src != "lib" {
		t.Fatalf("parsed %+v", r)
	}
	j, err := ParseRecipe([]byte(`{"name":"demo","base":"python","steps":[{"run":"echo hi"}]}`))
	if err != nil || j.Steps[0].Run != "echo hi" {
		t.Fatalf("json: %+v %v", j, err)
	}
	if _, err := ParseRecipe(images.Python); err != nil {
		t.Fatalf("the default recipe: %v", err)
	}
}

func TestParseRecipeErrors(t *testing.T) {
	for body, want := range map[string]string{
		``: "empty",
		`{"name":"x","base":"python","steps":[{"frobnicate":"x"}]}`:                  `unknown step kind "frobnicate"`,
		`{"name":"x","base":"python","steps":[{"run":"a","env":{"A":"1"}}]}`:         "exactly one kind",
		`{"name":"x","base":"python","extra":1}`:                                     "unknown field",
		`{"base":"python"}`:                                                          "name is required",
		`{"name":"x"}`:                                                               "base is required",
		`{"name":"x","base":"python","steps":[{"workdir":"rel"}]}`:                   "not absolute",
		`{"name":"x","base":"python","steps":[{"user":"root"}]}`:                     "never runs as root",
		`{"name":"x","base":"python","steps":[{"copy":{"src":"../a","dest":"/a"}}]}`: "escapes the build context",
		`{"name":"x","base":"python","steps":[{"copy":{"src":"/etc","dest":"/a"}}]}`: "escapes the build context",
		`{"name":"x","base":"python","steps":[{"copy":{"src":"a","dest":"rel"}}]}`:   "not absolute",
		`{"name":"x","base":"python","steps":[{"env":{"A=B":"1"}}]}`:                 "invalid variable name",
		"name: x\nbase: python\nsteps:\n  - run: [unclosed\n":                        "neither JSON nor YAML",
	} {
		_, err := ParseRecipe([]byte(body))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want invalid argument with %q", body, err, want)
		}
	}
}

func TestLookupUser(t *testing.T) {
	top, bottom := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(bottom, "etc"), 0o755)
	os.WriteFile(filepath.Join(bottom, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(bottom, "etc/group"), []byte("root:x:0:\nstaff:x:50:\n"), 0o644)
	lowers := []string{top, bottom}
	for spec, want := range map[string][2]int{"user": {1000, 1000}, "1234": {1234, 1234}, "1234:5": {1234, 5}, "user:staff": {1000, 50}} {
		uid, gid, err := lookupUser(lowers, spec)
		if err != nil || uid != want[0] || gid != want[1] {
			t.Errorf("%s: %d:%d %v, want %v", spec, uid, gid, err, want)
		}
	}
	if _, _, err := lookupUser(lowers, "nobody-here"); err == nil || !strings.Contains(err.Error(), "not in the image's /etc/passwd") {
		t.Errorf("missing user: %v", err)
	}
	// A newer layer's passwd wins.
	os.MkdirAll(filepath.Join(top, "etc"), 0o755)
	os.WriteFile(filepath.Join(top, "etc/passwd"), []byte("user:x:2000:2000::/home/user:/bin/sh\n"), 0o644)
	if uid, _, _ := lookupUser(lowers, "user"); uid != 2000 {
		t.Errorf("top layer's passwd ignored: uid %d", uid)
	}
}

func TestFindMirror(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755)
	os.WriteFile(filepath.Join(dir, "sources.list.d", "debian.sources"), []byte(
		"Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"+
			"Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\n"), 0o644)
	if got := findMirror(dir); got != "http://mirror.example/debian" {
		t.Fatalf("deb822: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "sources.list"), []byte("# comment\ndeb [arch=amd64 signed-by=/k.gpg] https://other.example/debian bookworm main\n"), 0o644)
	if got := findMirror(dir); got != "https://other.example/debian" {
		t.Fatalf("one-line: %q", got)
	}
	if got := findMirror(t.TempDir()); got != defaultMirror {
		t.Fatalf("none: %q", got)
	}
}

func TestContextPath(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "lib"), 0o755)
	os.Symlink("/etc", filepath.Join(dir, "link"))
	if p, err := contextPath(dir, "lib/"); err != nil || p != filepath.Join(dir, "lib") {
		t.Fatalf("lib: %q %v", p, err)
	}
	for src, want := range map[string]string{"link/passwd": "symlink", "missing": "not in the build context", "../x": "escapes"} {
		if _, err := contextPath(dir, src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", src, err, want)
		}
	}
}

func TestValidateAPIRecipe(t *testing.T) {
	r := &api.Recipe{Name: "x", Base: "python", Steps: []api.RecipeStep{{}}}
	if err := Validate(r); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("empty step: %v", err)
	}
}

func TestCopyInto(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "tool.sh"), []byte("echo hi\n"), 0o755)
	os.MkdirAll(filepath.Join(src, "pkg", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "pkg", "sub", "m.py"), []byte("X = 1\n"), 0o644)
	layer := t.TempDir()
	// A file into a directory (trailing slash), a file to a path, a
	// directory's contents.
	for _, c := range []struct{ src, dest, want string }{
		{"tool.sh", "/srv/work/", "srv/work/tool.sh"},
		{"tool.sh", "/usr/local/bin/tool", "usr/local/bin/tool"},
		{"pkg", "/opt/pkg", "opt/pkg/sub/m.py"},
	} {
		if err := copyInto(ctx, filepath.Join(src, c.src), layer, c.dest, "the layer of a copy step", 0); err != nil {
			t.Fatalf("%s → %s: %v", c.src, c.dest, err)
		}
		if _, err := os.Stat(filepath.Join(layer, c.want)); err != nil {
			t.Fatalf("%s → %s: %v", c.src, c.dest, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(layer, "srv/work")); fi == nil || !fi.IsDir() {
		t.Fatal("/srv/work/ is not a directory")
	}
}
