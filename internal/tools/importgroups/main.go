// Command importgroups checks how the Go files of a module group their
// imports, the way the module's code already does: the standard library's
// packages first, in one group; then, after a blank line, everything else,
// either in one group or with the module's own packages in a group after the
// third-party ones. gofmt sorts within a group but never moves an import
// between groups, so an import added in the wrong place stays there unless
// something checks.
//
// Usage: go run ./internal/tools/importgroups [dir]
//
// It walks dir (the current directory by default, which must hold go.mod),
// skipping what the go command skips (testdata, vendor, and directories
// whose name starts with "." or "_") and node_modules, and generated files.
// It prints each offending file with the import at fault and exits 1 if
// there is one.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	root := "."
	if len(os.Args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: importgroups [dir]")
		os.Exit(2)
	}
	if len(os.Args) == 2 {
		root = os.Args[1]
	}
	problems, err := checkTree(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "importgroups:", err)
		os.Exit(2)
	}
	if len(problems) == 0 {
		return
	}
	fmt.Fprintln(os.Stderr, "importgroups: these files group their imports wrongly (standard library first, a blank line, then the rest; the module's own packages may follow in a group of their own):")
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	os.Exit(1)
}

// checkTree checks every Go file under root, the directory of the module's
// go.mod, and returns one line per offending file.
func checkTree(root string) ([]string, error) {
	module, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	var problems []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || name == "vendor" || name == "node_modules" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		problem, err := checkFile(path, src, module)
		if err != nil {
			return err
		}
		if problem != "" {
			problems = append(problems, problem)
		}
		return nil
	})
	return problems, err
}

// modulePath reads the module path from a go.mod file.
func modulePath(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", fmt.Errorf("read the module path: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// kind is what an import path belongs to.
type kind int

const (
	stdlib kind = iota
	thirdParty
	own // the module's own packages
)

// classify tells the standard library from the rest the way goimports does:
// a standard library path has no dot in its first element.
func classify(path, module string) kind {
	if path == module || strings.HasPrefix(path, module+"/") {
		return own
	}
	first, _, _ := strings.Cut(path, "/")
	if !strings.Contains(first, ".") {
		return stdlib
	}
	return thirdParty
}

// group is a run of imports with no blank line between them.
type group struct {
	paths []string
	lines []int
}

// checkFile returns "file:line: what is wrong" for the first misplaced
// import of one file, or "" when its imports are grouped as they should be.
// Generated files are left alone: their generators decide.
func checkFile(name string, src []byte, module string) (string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return "", fmt.Errorf("parse: %w", err)
	}
	if ast.IsGenerated(f) {
		return "", nil
	}
	seenStd, seenOther, seenOwnOnly := false, false, false
	for _, g := range importGroups(fset, f, src) {
		std, third := 0, 0
		for _, p := range g.paths {
			switch classify(p, module) {
			case stdlib:
				std++
			case thirdParty:
				third++
			}
		}
		switch {
		case std > 0 && std < len(g.paths):
			// The first import of another kind than the group's first.
			first := classify(g.paths[0], module) == stdlib
			for i, p := range g.paths {
				if (classify(p, module) == stdlib) != first {
					return fmt.Sprintf("%s:%d: %q shares a group with imports of the other kind (standard library vs the rest)", name, g.lines[i], p), nil
				}
			}
		case std > 0 && seenOther:
			return fmt.Sprintf("%s:%d: standard library import %q comes after other imports", name, g.lines[0], g.paths[0]), nil
		case std > 0 && seenStd:
			return fmt.Sprintf("%s:%d: a blank line splits the standard library imports before %q", name, g.lines[0], g.paths[0]), nil
		case std > 0:
			seenStd = true
		case third > 0 && seenOwnOnly:
			return fmt.Sprintf("%s:%d: third-party import %q comes after a group of the module's own packages", name, g.lines[0], g.paths[0]), nil
		default:
			seenOther = true
			seenOwnOnly = seenOwnOnly || third == 0
		}
	}
	return "", nil
}

// importGroups splits a file's imports into groups: each import declaration
// starts one, and so does a blank line within a parenthesised declaration.
// import "C" (cgo) stands apart and belongs to no group.
func importGroups(fset *token.FileSet, f *ast.File, src []byte) []group {
	var groups []group
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.IMPORT {
			continue
		}
		var cur *group
		prevEnd := token.NoPos
		for _, spec := range gd.Specs {
			is := spec.(*ast.ImportSpec)
			path, err := strconv.Unquote(is.Path.Value)
			if err != nil || path == "C" {
				continue
			}
			start := is.Pos()
			if is.Doc != nil {
				start = is.Doc.Pos()
			}
			if cur == nil || blankLineBetween(src, fset.Position(prevEnd).Offset, fset.Position(start).Offset) {
				groups = append(groups, group{})
				cur = &groups[len(groups)-1]
			}
			cur.paths = append(cur.paths, path)
			cur.lines = append(cur.lines, fset.Position(is.Path.Pos()).Line)
			prevEnd = is.End()
			if is.Comment != nil {
				prevEnd = is.Comment.End()
			}
		}
	}
	return groups
}

// blankLineBetween tells whether src[from:to] holds an empty or
// whitespace-only line.
func blankLineBetween(src []byte, from, to int) bool {
	lines := bytes.Split(src[from:to], []byte("\n"))
	if len(lines) < 3 {
		return false
	}
	// The first piece ends the line of from, the last starts the line of to.
	for _, l := range lines[1 : len(lines)-1] {
		if len(bytes.TrimSpace(l)) == 0 {
			return true
		}
	}
	return false
}
