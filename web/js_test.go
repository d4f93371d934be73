package web

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestJavaScript runs the UI's JavaScript unit tests (web/test/*.test.js:
// Markdown, SSE parsing, the snapshot tree's layout, CSV, the highlighter,
// formatting, and that every module links) with Node's built-in test
// runner, so that `go test ./...` covers them; they need no npm package.
// They live outside static/ so that they are not embedded and served.
func TestJavaScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed, so the UI's JavaScript unit tests (web/test) did not run: scripts/setup.sh installs nodejs")
	}
	files, err := filepath.Glob(filepath.Join("test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no JavaScript tests in web/test: %v", err)
	}
	// The files are named one by one: how a directory argument is
	// searched differs between Node versions. --experimental-vm-modules
	// lets modules.test.js link the UI's modules without running them;
	// the test runner passes it on to each file's process.
	args := append([]string{"--experimental-vm-modules", "--test", "--test-reporter=spec"}, files...)
	cmd := exec.CommandContext(t.Context(), node, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test web/test: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("node --test web/test:\n%s", out)
	}
}
