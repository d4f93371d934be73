package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestSDKJS runs the TypeScript SDK's tests (sdk/js/test, node:test) with
// FORKBOX_URL pointing at the shared daemon: its unit tests, and its
// integration tests of the seed's lifecycle, the image builder and typed
// errors through the SDK alone. The SDK ships compiled (sdk/js/dist), so
// nothing is built or installed here; Node.js 20 or later must be on PATH
// (scripts/setup.sh installs it).
func TestSDKJS(t *testing.T) {
	needRoot(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: the TypeScript SDK's tests need Node.js 20 or later (scripts/setup.sh installs it)")
	}
	dir, err := filepath.Abs("../../sdk/js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dist", "index.js")); err != nil {
		t.Fatalf("the SDK's compiled JavaScript is missing (run npm ci && npm run build in sdk/js): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "test/")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FORKBOX_URL=http://"+shared.addr, "FORKBOX_API_KEY=", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test sdk/js/test/: %v\n%s\ndaemon log:\n%s", err, out, shared.logTail())
	}
	t.Logf("node --test sdk/js/test/:\n%s", out)
}
