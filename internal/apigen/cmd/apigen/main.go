// Command apigen rewrites the files generated from the API's sources (see
// package apigen): run by `go generate ./internal/apigen`.
package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"

	"github.com/forkbox/forkbox/internal/apigen"
)

func main() {
	if err := run(); err != nil {
		slog.Error("apigen", "err", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := apigen.Root()
	if err != nil {
		return err
	}
	files, err := apigen.Generate(root)
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(root, p)
		if old, err := os.ReadFile(full); err == nil && bytes.Equal(old, files[p]) {
			continue
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		fmt.Println("apigen: wrote", p)
	}
	return nil
}
