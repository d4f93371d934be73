package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
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

// runCLISplit runs the forkbox binary against the shared daemon with its
// stdout and stderr apart.
func runCLISplit(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "FORKBOX_URL=http://"+shared.addr)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// lineWith returns the first line of out whose fields include word, with
// its fields joined by single spaces ("" if none), and its index.
func lineWith(out, word string) (string, int) {
	for i, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		for _, w := range f {
			if w == word {
				return strings.Join(f, " "), i
			}
		}
	}
	return "", -1
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

// TestCLIListAndSnapshots: against the real daemon, create takes --memory
// 1G; ls hides a terminated sandbox (and says so) until --all; snapshots
// draws a checkpoint of a sandbox restored from another checkpoint under
// it; limits beyond the host and a missing image are refused with the
// daemon's message, once, and the next step.
func TestCLIListAndSnapshots(t *testing.T) {
	needRoot(t)
	out, errOut, err := runCLISplit(t, "--json", "create", "--name", "cli-tree", "--memory", "1G", "--disk", "1.5G")
	var a api.Sandbox
	if err != nil || json.Unmarshal([]byte(out), &a) != nil || a.MemoryMB != 1024 || a.DiskMB != 1536 {
		t.Fatalf("create --memory 1G --disk 1.5G: %v %s %s", err, out, errOut)
	}
	t.Cleanup(func() { shared.c.DeleteSandbox(ctxT(t), a.ID) })
	if out, _, err := runCLISplit(t, "ls"); err != nil || !strings.Contains(out, a.ID) || !strings.Contains(out, "1 GiB") {
		t.Fatalf("ls: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "", "exec", "cli-tree", "--", "sh", "-c", "echo one > /workspace/f"); err != nil {
		t.Fatalf("exec: %v %s", err, out)
	}

	// checkpoint → restore → checkpoint: the second is the first's child.
	out, errOut, err = runCLISplit(t, "checkpoint", "--name", "first", "cli-tree")
	snapA := strings.TrimSpace(out)
	if err != nil || !strings.HasPrefix(snapA, "snap_") {
		t.Fatalf("checkpoint: %v %q %s", err, out, errOut)
	}
	t.Cleanup(func() { shared.c.DeleteSnapshot(ctxT(t), snapA) })
	out, errOut, err = runCLISplit(t, "create", "--snapshot", snapA, "--name", "cli-tree-2")
	bID := strings.TrimSpace(out)
	if err != nil || !strings.HasPrefix(bID, "sbx_") {
		t.Fatalf("create --snapshot: %v %q %s", err, out, errOut)
	}
	t.Cleanup(func() { shared.c.DeleteSandbox(ctxT(t), bID) })
	out, errOut, err = runCLISplit(t, "checkpoint", "cli-tree-2")
	snapB := strings.TrimSpace(out)
	if err != nil || !strings.HasPrefix(snapB, "snap_") {
		t.Fatalf("checkpoint of the restored sandbox: %v %q %s", err, out, errOut)
	}
	t.Cleanup(func() { shared.c.DeleteSnapshot(ctxT(t), snapB) })

	out, _, err = runCLISplit(t, "snapshots")
	t.Logf("forkbox snapshots:\n%s", out)
	lineA, iA := lineWith(out, snapA)
	lineB, iB := lineWith(out, snapB)
	if err != nil || !strings.HasPrefix(out, "SNAPSHOT") ||
		!strings.HasPrefix(lineA, snapA+" first filesystem ") || !strings.HasSuffix(lineA, " cli-tree cli-tree-2") ||
		iB != iA+1 || !strings.HasPrefix(lineB, "└─ "+snapB+" - filesystem ") || !strings.HasSuffix(lineB, " cli-tree-2 -") {
		t.Fatalf("snapshots tree: %v\n%s", err, out)
	}
	// One sandbox's snapshots; --flat keeps the table with PARENT.
	if out, _, err := runCLISplit(t, "snapshots", "cli-tree-2"); err != nil || strings.Contains(out, snapA) || !strings.Contains(out, "\n"+snapB+" ") {
		t.Fatalf("snapshots cli-tree-2: %v\n%s", err, out)
	}
	out, _, err = runCLISplit(t, "snapshots", "--flat")
	if l, _ := lineWith(out, snapB); err != nil || !strings.HasPrefix(strings.Join(strings.Fields(out), " "), "ID TYPE NAME SANDBOX PARENT SIZE") ||
		!strings.HasPrefix(l, snapB+" filesystem - "+bID+" "+snapA+" ") {
		t.Fatalf("snapshots --flat: %v\n%s", err, out)
	}

	// ls hides the terminated sandbox and says so; --all shows it.
	if out, err := runCLI(t, "", "rm", "cli-tree-2"); err != nil {
		t.Fatalf("rm: %v %s", err, out)
	}
	out, errOut, err = runCLISplit(t, "ls")
	if err != nil || strings.Contains(out, bID) || !strings.Contains(out, a.ID) || !strings.Contains(errOut, "terminated sandboxes hidden; --all shows them") {
		t.Fatalf("ls after rm: %v\n%s\nstderr %s", err, out, errOut)
	}
	out, errOut, err = runCLISplit(t, "ls", "--all")
	if l, _ := lineWith(out, bID); err != nil || !strings.HasPrefix(l, bID+" cli-tree-2 terminated ") || errOut != "" {
		t.Fatalf("ls --all: %v\n%s\nstderr %s", err, out, errOut)
	}
	var list api.SandboxList
	out, _, err = runCLISplit(t, "--json", "ls")
	if err != nil || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("ls --json: %v %s", err, out)
	}
	for _, sb := range list.Sandboxes {
		if sb.State == api.StateTerminated {
			t.Fatalf("ls --json lists terminated %s", sb.ID)
		}
	}

	// Beyond the host: the daemon's 400, as it is. Nothing is created.
	before := countSandboxes(t, shared)
	if memTotalMiB(t) < 65536 {
		_, errOut, err = runCLISplit(t, "create", "--memory", "64G", "--cpus", "64")
		want := fmt.Sprintf("forkbox: memory_mb: 65536 is more than this host has (%d MiB; at most ", memTotalMiB(t))
		if err == nil || !strings.HasPrefix(errOut, want) {
			t.Fatalf("create --memory 64G --cpus 64: %v %q, want %q…", err, errOut, want)
		}
		// Both refusals at once, so that the next try can fix both.
		if n := goruntime.NumCPU(); n < 64 && !strings.HasSuffix(errOut, fmt.Sprintf("; cpus: 64 is more than this host has (%d CPUs; at most %d for one sandbox)\n", n, n)) {
			t.Fatalf("create --memory 64G --cpus 64 names only the memory: %q", errOut)
		}
	}
	if n := goruntime.NumCPU(); n < 64 {
		_, errOut, err = runCLISplit(t, "create", "--cpus", "64")
		want := fmt.Sprintf("forkbox: cpus: 64 is more than this host has (%d CPUs; at most %d for one sandbox)\n", n, n)
		if err == nil || errOut != want {
			t.Fatalf("create --cpus 64: %v %q, want %q", err, errOut, want)
		}
	}
	// A missing image: once "image", and where to look.
	_, errOut, err = runCLISplit(t, "create", "--image", "nosuchimage")
	if want := "forkbox: image \"nosuchimage\" not found; forkbox image ls lists the images\n"; err == nil || errOut != want {
		t.Fatalf("create --image nosuchimage: %v %q, want %q", err, errOut, want)
	}
	// A bad size never reaches the daemon.
	_, errOut, err = runCLISplit(t, "create", "--memory", "1X")
	if want := "forkbox: --memory: \"1X\" is not a size; use 512M, 1G or a number of MiB\n"; err == nil || errOut != want {
		t.Fatalf("create --memory 1X: %v %q, want %q", err, errOut, want)
	}
	if n := countSandboxes(t, shared); n != before {
		t.Fatalf("refused creates made %d sandboxes", n-before)
	}
	// A missing sandbox points at ls --all.
	_, errOut, err = runCLISplit(t, "exec", "sbx_nope", "--", "true")
	if want := "forkbox: sandbox \"sbx_nope\" not found; forkbox ls --all lists the sandboxes\n"; err == nil || errOut != want {
		t.Fatalf("exec on a missing sandbox: %v %q, want %q", err, errOut, want)
	}
}
