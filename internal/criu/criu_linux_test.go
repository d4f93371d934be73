package criu

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// criuTimeout bounds every CRIU run in these tests, so that a CRIU that hangs
// (as it does without CRIU_FAULT=130 where breakpoints are broken) fails the
// test instead of hanging CI.
const criuTimeout = 60 * time.Second

// fakeCRIU writes a script that answers `--version` like a CRIU of version v.
func fakeCRIU(t *testing.T, v string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "criu")
	script := "#!/bin/sh\necho 'Version: " + v + "'\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFindHonoursEnv(t *testing.T) {
	p := fakeCRIU(t, "4.2.1")
	t.Setenv(EnvPath, p)
	path, version, err := Find()
	if err != nil || path != p || version != "4.2.1" {
		t.Fatalf("Find() = %q, %q, %v; want %q, 4.2.1, nil", path, version, err, p)
	}
}

func TestFindRefusesOldCRIU(t *testing.T) {
	t.Setenv(EnvPath, fakeCRIU(t, "3.17.1"))
	_, _, err := Find()
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "6.13") {
		t.Fatalf("Find() with criu 3.17.1: err = %v; want ErrUnavailable naming kernel 6.13", err)
	}
}

func TestFindMissing(t *testing.T) {
	t.Setenv(EnvPath, filepath.Join(t.TempDir(), "nope"))
	_, _, err := Find()
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "make setup") {
		t.Fatalf("Find() with a missing binary: err = %v; want ErrUnavailable that says to run make setup", err)
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"4.2", true}, {"4.2.1", true}, {"4.10", true}, {"5.0", true}, {"4.2-rc1", true},
		{"4.1.1", false}, {"3.17.1", false}, {"4", false}, {"", false},
	} {
		if got := versionAtLeast(c.v, MinVersion); got != c.want {
			t.Errorf("versionAtLeast(%q, %q) = %v, want %v", c.v, MinVersion, got, c.want)
		}
	}
}

func TestWarnings(t *testing.T) {
	out := []byte("Warn  (criu/kerndat.c:1799): Hardware breakpoints don't seem to work (status=137f)\n" +
		"Warn  (criu/cr-check.c:1595): Hardware breakpoints don't seem to work\n" +
		"Looks good.\n")
	got := warnings(out)
	want := []string{"Hardware breakpoints don't seem to work (status=137f)"}
	if !slices.Equal(got, want) {
		t.Fatalf("warnings() = %q, want %q", got, want)
	}
}

// realHost skips unless the test runs as root with a CRIU that Find accepts.
func realHost(t *testing.T) (path, version string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("CRIU tests need root (criu check, dump and restore)")
	}
	path, version, err := Find()
	if err != nil {
		t.Skipf("no usable CRIU (run make setup): %v", err)
	}
	return path, version
}

func TestFindReal(t *testing.T) {
	path, version := realHost(t)
	if !versionAtLeast(version, MinVersion) {
		t.Fatalf("Find() = %s version %s, older than %s", path, version, MinVersion)
	}
	t.Logf("criu %s at %s", version, path)
}

func TestCheck(t *testing.T) {
	path, _ := realHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), criuTimeout)
	defer cancel()

	start := time.Now()
	h, err := Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Check took %v: %+v", time.Since(start).Round(time.Millisecond), *h)
	if !h.Usable {
		t.Fatalf("Check: host not usable: %s", h.Problem)
	}
	if h.Problem != "" {
		t.Errorf("usable host has a Problem: %q", h.Problem)
	}
	for _, f := range requiredFeatures {
		if !h.Features[f] {
			t.Errorf("usable host lacks required feature %s", f)
		}
	}
	// Lazy restores: where the kernel has the userfaultfd device, the
	// CRIU that make setup builds can use it.
	if _, err := os.Stat(uffdDevice); err == nil && h.Features[FeatureLazyPages] && (!h.LazyPages || !h.viaDevice) {
		t.Errorf("host has %s and %s but no lazy restores through the device (lazy %v): %s", uffdDevice, FeatureLazyPages, h.LazyPages, h.LazyProblem)
	}
	if h.LazyPages != (h.LazyProblem == "") {
		t.Errorf("LazyPages %v with LazyProblem %q", h.LazyPages, h.LazyProblem)
	}

	// CRIU keeps its kernel-feature cache in KdatDir, a root-only tmpfs,
	// and a run that finds it does not probe the kernel again.
	var st unix.Statfs_t
	if err := unix.Statfs(KdatDir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Fatalf("%s is not a tmpfs after Check: %v (type %#x)", KdatDir, err, st.Type)
	}
	if fi, err := os.Stat(KdatDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v %v, want a root-only dir", KdatDir, fi, err)
	}
	if _, err := os.Stat(filepath.Join(KdatDir, "criu.kdat")); err != nil {
		t.Fatalf("no kernel-feature cache after Check (is CRIU built with RUNDIR=%s? make setup rebuilds it): %v", KdatDir, err)
	}
	logf := filepath.Join(t.TempDir(), "check.log")
	if out, err := exec.CommandContext(ctx, path, "check", "-v4", "--log-file", logf).CombinedOutput(); err != nil {
		t.Fatalf("criu check: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(logf); !strings.Contains(string(b), "Loaded kdat cache from "+filepath.Join(KdatDir, "criu.kdat")) {
		t.Fatalf("criu check did not load the cache:\n%s", b)
	}
	if err := ensureKdatDir(); err != nil { // idempotent: already a tmpfs
		t.Fatalf("ensureKdatDir again: %v", err)
	}

	// CRIU_FAULT=130 exactly when `criu check` warns about breakpoints.
	out, _ := exec.CommandContext(ctx, path, "check").CombinedOutput()
	broken := strings.Contains(string(out), breakpointWarning)
	if got := slices.Contains(h.Env, noBreakpointsEnv); got != broken {
		t.Errorf("Env = %q; breakpoint warning in `criu check` = %v:\n%s", h.Env, broken, out)
	}
}

// TestDumpRestore checkpoints a plain process with --leave-running, kills
// it, restores it detached under the same pid and checks that it runs.
func TestDumpRestore(t *testing.T) {
	realHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*criuTimeout)
	defer cancel()
	h, err := Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Usable {
		t.Skipf("CRIU not usable here: %s", h.Problem)
	}

	// Stdio stays nil (/dev/null): CRIU refuses a process whose files it
	// cannot restore, such as the test's pipes.
	sleep := exec.Command("/bin/sleep", "1000")
	sleep.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	pid := sleep.Process.Pid
	waited := false
	defer func() {
		if !waited {
			_ = sleep.Process.Kill()
			_ = sleep.Wait()
		}
	}()

	dir := t.TempDir()
	run := func(what string, args ...string) time.Duration {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, criuTimeout)
		defer cancel()
		cmd := h.Command(cctx, args...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		took := time.Since(start)
		if err != nil {
			logText, _ := os.ReadFile(filepath.Join(dir, what+".log"))
			t.Fatalf("criu %s (took %v, ctx: %v): %v\n%s\n--- %s.log (tail) ---\n%s", strings.Join(args, " "),
				took.Round(time.Millisecond), cctx.Err(), err, out, what, tail(string(logText), 30))
		}
		t.Logf("criu %s: %v", strings.Join(args, " "), took.Round(time.Millisecond))
		return took
	}

	run("dump", "dump", "-t", strconv.Itoa(pid), "-D", dir, "-o", "dump.log", "-v4", "--leave-running")
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("process %d gone after dump --leave-running: %v", pid, err)
	}

	// The pid must be free again for the restore.
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	waited = true

	run("restore", "restore", "-D", dir, "-o", "restore.log", "-v4", "-d")
	// The restored process is no child of ours (CRIU's -d detaches it):
	// kill it by pid, once it is known to be it.
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		t.Fatalf("no process %d after restore: %v", pid, err)
	}
	if got := strings.TrimSpace(string(comm)); got != "sleep" {
		t.Fatalf("process %d after restore is %q, want sleep", pid, got)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	state, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if f := strings.Fields(string(state)); len(f) > 2 && (f[2] == "Z" || f[2] == "T") {
		t.Fatalf("restored process %d is in state %s, want running or sleeping", pid, f[2])
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
