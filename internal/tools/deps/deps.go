// Package deps keeps a binary's checked-in list of the packages outside the
// standard library that it links (cmd/*/deps.txt) in step with what go list
// says it links, so that a new dependency, or a daemon-side package reaching
// the agent, shows up as a diff in review rather than unnoticed in a binary.
// Each binary's TestDeps calls Check; its -update flag rewrites the list.
// Packages and ImportChain let a test hold a binary to what it may link
// and name the imports that pull in what it may not.
package deps

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// platform is what make build builds for. What a package imports depends on
// GOOS, GOARCH and cgo (build constraints), so the list is made for this one
// platform wherever the test runs; GOFLAGS is cleared so that no tags from
// the environment slip in.
var platform = []string{"GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0", "GOFLAGS="}

// Package is one package a binary links, as go list -deps -json tells it.
type Package struct {
	ImportPath string
	Standard   bool     // in the standard library
	DepOnly    bool     // false for the package built itself
	Imports    []string // import paths, vendored ones as they resolve
	Module     *struct {
		Path string
		Main bool // the module the binary is built in
	}
}

// Packages is what go list -deps says the package in dir links, built with
// tags for platform: every package, the standard library's too, each
// after the packages it imports, so the package itself comes last.
func Packages(ctx context.Context, dir string, tags ...string) ([]Package, error) {
	args := []string{"list", "-deps", "-json=ImportPath,Standard,DepOnly,Imports,Module"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), platform...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var pkgs []Package
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p Package
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 || pkgs[len(pkgs)-1].DepOnly {
		return nil, fmt.Errorf("go list -deps in %s: the package itself is not last", dir)
	}
	return pkgs, nil
}

// List is what go list -deps says the package in dir links, built with
// tags: the sorted import paths outside the standard library (the module's
// own packages included, the package itself not), and the command-line
// path of the package (./cmd/forkbox) for messages.
func List(ctx context.Context, dir string, tags ...string) (pkgs []string, self string, err error) {
	all, err := Packages(ctx, dir, tags...)
	if err != nil {
		return nil, "", err
	}
	for _, p := range all {
		if p.DepOnly && !p.Standard {
			pkgs = append(pkgs, p.ImportPath)
		}
	}
	slices.Sort(pkgs)
	return pkgs, CommandPath(all[len(all)-1]), nil
}

// CommandPath is how a command line names p: ./ and its path in the module
// for a package of the main module (./cmd/forkbox), else its import path.
func CommandPath(p Package) string {
	if p.Module != nil && p.Module.Main && strings.HasPrefix(p.ImportPath, p.Module.Path+"/") {
		return "./" + strings.TrimPrefix(p.ImportPath, p.Module.Path+"/")
	}
	return p.ImportPath
}

// ImportChain is the shortest chain of imports among pkgs by which from
// links to: from first, to last; nil when it does not.
func ImportChain(pkgs []Package, from, to string) []string {
	imports := make(map[string][]string, len(pkgs))
	for _, p := range pkgs {
		imports[p.ImportPath] = p.Imports
	}
	via := map[string]string{from: ""} // how the search reached each package
	for queue := []string{from}; len(queue) > 0; queue = queue[1:] {
		cur := queue[0]
		if cur == to {
			var chain []string
			for p := to; p != ""; p = via[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, next := range imports[cur] {
			if _, seen := via[next]; !seen {
				via[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return nil
}

// Format is the content of a deps.txt: a header that says what it lists and
// how to regenerate it, then one import path a line.
func Format(self string, tags []string, pkgs []string) []byte {
	var b bytes.Buffer
	build := strings.Join(platform[:3], " ")
	if len(tags) > 0 {
		build += " -tags " + strings.Join(tags, ",")
	}
	fmt.Fprintf(&b, "# The packages outside the standard library that %s links\n", self)
	fmt.Fprintf(&b, "# (go list -deps, %s).\n", build)
	fmt.Fprintf(&b, "# Regenerate: %s\n", updateCommand(self))
	for _, p := range pkgs {
		b.WriteString(p)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Parse returns the import paths a deps.txt lists.
func Parse(data []byte) []string {
	var pkgs []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			pkgs = append(pkgs, line)
		}
	}
	return pkgs
}

// Diff lists what got has that want lacks ("+ path") and what want has that
// got lacks ("- path"), in import path order.
func Diff(want, got []string) []string {
	var lines []string
	for _, p := range got {
		if !slices.Contains(want, p) {
			lines = append(lines, "+ "+p)
		}
	}
	for _, p := range want {
		if !slices.Contains(got, p) {
			lines = append(lines, "- "+p)
		}
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(a[2:], b[2:]) })
	return lines
}

func updateCommand(self string) string {
	return "go test " + self + " -run '^TestDeps$' -update"
}

// Check fails t unless file (the package's deps.txt, in the test's
// directory) is what Format makes of List for the package under test; with
// update it writes file instead.
func Check(t *testing.T, file string, update bool, tags ...string) {
	t.Helper()
	pkgs, self, err := List(t.Context(), ".", tags...)
	if err != nil {
		t.Fatal(err)
	}
	want := Format(self, tags, pkgs)
	if update {
		if err := os.WriteFile(file, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v\ncreate it: %s", err, updateCommand(self))
	}
	if bytes.Equal(have, want) {
		return
	}
	if diff := Diff(Parse(have), pkgs); len(diff) > 0 {
		t.Fatalf("%s links other packages than %s lists (+ links now, - no longer):\n%s\n"+
			"If the change is meant, update the list and commit it with the change: %s",
			self, file, strings.Join(diff, "\n"), updateCommand(self))
	}
	t.Fatalf("%s lists what %s links, but not in its generated form; rewrite it: %s", file, self, updateCommand(self))
}
