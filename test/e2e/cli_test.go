package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
)

// runCLI runs the forkbox binary against the shared daemon.
func runCLI(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "FORKBOX_URL=http://"+shared.addr)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestCLI(t *testing.T) {
	needRoot(t)
	out, err := runCLI(t, "", "create", "--json", "--name", "cli-e2e", "--memory", "256")
	if err != nil {
		t.Fatalf("create: %v %s", err, out)
	}
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.Name != "cli-e2e" || sb.MemoryMB != 256 {
		t.Fatalf("create --json: %q %v", out, err)
	}
	t.Cleanup(func() { shared.c.DeleteSandbox(ctxT(t), sb.ID) })

	if out, err := runCLI(t, "", "ls"); err != nil || !strings.Contains(out, sb.ID) || !strings.Contains(out, "cli-e2e") || !strings.Contains(out, "running") {
		t.Fatalf("ls: %v %s", err, out)
	}
	if out, err := runCLI(t, "", "exec", "cli-e2e", "--", "python3", "-c", "print(6*7)"); err != nil || out != "42\n" {
		t.Fatalf("exec: %v %q", err, out)
	}
	// The remote exit code becomes the CLI's.
	_, err = runCLI(t, "", "exec", "cli-e2e", "--", "sh", "-c", "exit 3")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("exec exit 3: %v", err)
	}
	// cp both ways, byte for byte.
	dir := t.TempDir()
	src := filepath.Join(dir, "up.bin")
	data := make([]byte, 3<<20)
	rand.Read(data)
	os.WriteFile(src, data, 0o644)
	if out, err := runCLI(t, "", "cp", src, "cli-e2e:/workspace/up.bin"); err != nil {
		t.Fatalf("cp up: %v %s", err, out)
	}
	dst := filepath.Join(dir, "down.bin")
	if out, err := runCLI(t, "", "cp", "cli-e2e:/workspace/up.bin", dst); err != nil {
		t.Fatalf("cp down: %v %s", err, out)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Fatal("cp round trip changed the bytes")
	}
	if out, err := runCLI(t, "", "exec", "cli-e2e", "--", "stat", "-c", "%s", "/workspace/up.bin"); err != nil || strings.TrimSpace(out) != "3145728" {
		t.Fatalf("uploaded size inside: %v %q", err, out)
	}
	if out, err := runCLI(t, "", "rm", "cli-e2e"); err != nil {
		t.Fatalf("rm: %v %s", err, out)
	}
	got, err := shared.c.GetSandbox(ctxT(t), sb.ID)
	if err != nil || got.State != api.StateTerminated {
		t.Fatalf("after rm: %+v %v", got, err)
	}
	assertNoLeaks(t, shared, sb.ID)
	// Errors are readable and fail the command.
	if out, err := runCLI(t, "", "exec", "sbx_nope", "--", "true"); err == nil || !strings.Contains(out, "not found") {
		t.Fatalf("exec on unknown sandbox: %v %q", err, out)
	}
}
