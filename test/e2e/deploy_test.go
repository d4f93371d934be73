package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSystemdUnit: deploy/forkbox.service starts the binary `make install`
// puts in place with flags that `forkbox serve` takes, keeps sandboxes over
// restarts (--on-exit=keep, KillMode=process), and systemd reads it.
func TestSystemdUnit(t *testing.T) {
	f, err := os.Open("../../deploy/forkbox.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = v
		}
	}
	exe := strings.Fields(keys["ExecStart"])
	if len(exe) < 2 || exe[0] != "/usr/local/bin/forkbox" || exe[1] != "serve" {
		t.Fatalf("ExecStart = %q; want /usr/local/bin/forkbox serve …", keys["ExecStart"])
	}
	if keys["KillMode"] != "process" || !strings.Contains(keys["ExecStart"], "--on-exit=keep") {
		t.Errorf("the unit must leave sandboxes to the on-exit policy (KillMode=process) and keep them over restarts: KillMode=%q ExecStart=%q", keys["KillMode"], keys["ExecStart"])
	}
	bin := binary
	if bin == "" {
		t.Skip(skipWhy)
	}
	help, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("forkbox serve --help: %v\n%s", err, help)
	}
	for _, a := range exe[2:] {
		if name, _, _ := strings.Cut(a, "="); strings.HasPrefix(name, "--") && !strings.Contains(string(help), name+" ") {
			t.Errorf("ExecStart passes %s, which forkbox serve does not take", name)
		}
	}
	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		// verify reads the unit; the binary need not be installed here.
		out, _ := exec.Command(sa, "verify", "../../deploy/forkbox.service").CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if line != "" && !strings.Contains(line, "/usr/local/bin/forkbox") && !strings.Contains(line, "Failed to") {
				t.Errorf("systemd-analyze verify: %s", line)
			}
		}
	}
}
