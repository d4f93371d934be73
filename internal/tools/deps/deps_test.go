package deps

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// writeTree writes files (path: content) under a new temporary directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// testModule writes a module whose command cmd/x imports a (which imports
// c), b only with the tag extra, and w only where it is never built for.
func testModule(t *testing.T) (dir string) {
	root := writeTree(t, map[string]string{
		"go.mod":             "module example.com/m\n\ngo 1.26\n",
		"a/a.go":             "package a\n\nimport \"example.com/m/c\"\n\nvar A = c.C\n",
		"b/b.go":             "package b\n\nconst B = 1\n",
		"c/c.go":             "package c\n\nconst C = 1\n",
		"w/w.go":             "package w\n\nconst W = 1\n",
		"cmd/x/main.go":      "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/m/a\"\n)\n\nfunc main() { fmt.Println(a.A) }\n",
		"cmd/x/tagged.go":    "//go:build extra\n\npackage main\n\nimport \"example.com/m/b\"\n\nvar _ = b.B\n",
		"cmd/x/x_windows.go": "package main\n\nimport \"example.com/m/w\"\n\nvar _ = w.W\n",
		"cmd/x/x_test.go":    "package main\n\nimport \"example.com/m/w\"\n\nvar _ = w.W\n",
		"cmd/x/cgo_linux.go": "//go:build cgo\n\npackage main\n\nimport \"example.com/m/w\"\n\nvar _ = w.W\n",
	})
	return filepath.Join(root, "cmd", "x")
}

func TestList(t *testing.T) {
	dir := testModule(t)
	for _, tc := range []struct {
		tags []string
		want []string
	}{
		{want: []string{"example.com/m/a", "example.com/m/c"}},
		{tags: []string{"extra"}, want: []string{"example.com/m/a", "example.com/m/b", "example.com/m/c"}},
	} {
		pkgs, self, err := List(t.Context(), dir, tc.tags...)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(pkgs, tc.want) || self != "./cmd/x" {
			t.Errorf("List(tags %q) = %q, %q; want %q, %q", tc.tags, pkgs, self, tc.want, "./cmd/x")
		}
	}
}

func TestImportChain(t *testing.T) {
	pkgs, err := Packages(t.Context(), testModule(t), "extra")
	if err != nil {
		t.Fatal(err)
	}
	self := pkgs[len(pkgs)-1]
	if self.ImportPath != "example.com/m/cmd/x" || self.DepOnly || CommandPath(self) != "./cmd/x" {
		t.Fatalf("last package %+v, want the command itself", self)
	}
	for _, tc := range []struct {
		to   string
		want []string
	}{
		{"example.com/m/c", []string{"example.com/m/cmd/x", "example.com/m/a", "example.com/m/c"}},
		{"example.com/m/b", []string{"example.com/m/cmd/x", "example.com/m/b"}},
		{"fmt", []string{"example.com/m/cmd/x", "fmt"}},
		{"example.com/m/w", nil},
	} {
		if got := ImportChain(pkgs, self.ImportPath, tc.to); !slices.Equal(got, tc.want) {
			t.Errorf("ImportChain(%s) = %q, want %q", tc.to, got, tc.want)
		}
	}
}

func TestFormatParse(t *testing.T) {
	pkgs := []string{"example.com/m/a", "golang.org/x/sys/unix"}
	data := Format("./cmd/x", []string{"extra"}, pkgs)
	want := "# The packages outside the standard library that ./cmd/x links\n" +
		"# (go list -deps, GOOS=linux GOARCH=amd64 CGO_ENABLED=0 -tags extra).\n" +
		"# Regenerate: go test ./cmd/x -run '^TestDeps$' -update\n" +
		"example.com/m/a\ngolang.org/x/sys/unix\n"
	if string(data) != want {
		t.Errorf("Format = %q, want %q", data, want)
	}
	if got := Parse(data); !slices.Equal(got, pkgs) {
		t.Errorf("Parse(Format(%q)) = %q", pkgs, got)
	}
}

func TestDiff(t *testing.T) {
	want := []string{"a", "b", "d"}
	got := []string{"a", "c", "d", "e"}
	if d := Diff(want, got); !slices.Equal(d, []string{"- b", "+ c", "+ e"}) {
		t.Errorf("Diff = %q", d)
	}
	if d := Diff(want, want); len(d) != 0 {
		t.Errorf("Diff of equal lists = %q", d)
	}
}
