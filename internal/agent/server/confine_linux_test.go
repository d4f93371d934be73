package server

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/harden"
	"golang.org/x/sys/unix"
)

// These tests need no root: they run the agent's path handling against a
// temporary directory standing in for the sandbox root, as the current user.

func TestCleanPath(t *testing.T) {
	s := &server{cfg: wire.Config{WorkDir: "/workspace"}}
	ok := map[string]string{
		"data.csv":           "/workspace/data.csv",
		"a/./b//c":           "/workspace/a/b/c",
		"/etc/passwd":        "/etc/passwd",
		"/":                  "/",
		"/workspace/":        "/workspace",
		"/procfs/x":          "/procfs/x", // only the tree itself is refused
		"/.forkboxes/a":      "/.forkboxes/a",
		"/workspace/proc/1":  "/workspace/proc/1",
		"/tmp/dev/null-file": "/tmp/dev/null-file",
	}
	for in, want := range ok {
		if got, err := s.cleanPath(in); err != nil || got != want {
			t.Errorf("cleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "../etc", "/workspace/../etc", "a/..", "/proc", "/proc/1/mem", "/sys/kernel", "/dev/zero", "/.forkbox/run/agent.json", "a\x00b"} {
		if got, err := s.cleanPath(in); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("cleanPath(%q) = %q, %v; want invalid argument", in, got, err)
		}
	}
}

func TestPathErrSaysTheSandboxIsLeft(t *testing.T) {
	for _, errno := range []error{unix.EXDEV, unix.ELOOP} {
		err := pathErr("/workspace/p/environ", errno)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "leaves the sandbox's filesystem") {
			t.Errorf("pathErr(%v) = %v", errno, err)
		}
	}
	api := errdefs.InvalidArgument("already said")
	if got := pathErr("/x", api); got != api {
		t.Errorf("an API error is passed through, got %v", got)
	}
	if got := pathErr("/x", unix.ENOENT); !errors.Is(got, errdefs.ErrNotFound) {
		t.Errorf("ENOENT = %v", got)
	}
}

func TestWantedCaps(t *testing.T) {
	plain := wantedCaps(false)
	if capHex(plain.eff) != "00000000000000e0" || plain.prm != plain.eff {
		t.Errorf("sandbox agent keeps eff %s prm %s; want only SETUID, SETGID and KILL", capHex(plain.eff), capHex(plain.prm))
	}
	build := wantedCaps(true)
	if build.eff != plain.eff {
		t.Errorf("build agent's effective set %s, want the same as any agent's", capHex(build.eff))
	}
	bc := capMask(harden.BuildCaps)
	if build.prm[0]&bc[0] != bc[0] || build.prm[1]&bc[1] != bc[1] {
		t.Errorf("build agent's permitted set %s lacks BuildCaps %s", capHex(build.prm), capHex(bc))
	}
	never := []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_MKNOD, unix.CAP_SYS_PTRACE, unix.CAP_DAC_READ_SEARCH,
		unix.CAP_SYS_MODULE, unix.CAP_NET_ADMIN, unix.CAP_SYS_RAWIO, unix.CAP_SYS_RESOURCE, unix.CAP_BPF}
	for _, c := range never {
		m := capMask([]uintptr{c})
		for _, set := range [][2]uint32{plain.eff, plain.prm, build.eff, build.prm} {
			if set[0]&m[0] != 0 || set[1]&m[1] != 0 {
				t.Errorf("capability %d kept in %s", c, capHex(set))
			}
		}
	}
	for _, c := range []uintptr{unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_CHOWN} {
		m := capMask([]uintptr{c})
		for _, set := range [][2]uint32{plain.eff, plain.prm, build.eff} {
			if set[0]&m[0] != 0 {
				t.Errorf("capability %d in %s", c, capHex(set))
			}
		}
	}
}

// TestOpenNodeConfinement: the files API's resolution, against a stand-in
// root: in-root symlinks work; escapes, magic links, other mounts, FIFOs and
// directories are refused, and nothing blocks.
func TestOpenNodeConfinement(t *testing.T) {
	s, root := testServer(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "workspace", "sub"), 0o755))
	must(os.WriteFile(filepath.Join(root, "workspace", "sub", "data.txt"), []byte("data"), 0o644))
	must(os.Symlink("sub/data.txt", filepath.Join(root, "workspace", "rel-link")))
	must(os.Symlink("../workspace/sub", filepath.Join(root, "workspace", "up-and-back")))
	must(os.Symlink("/workspace/sub/data.txt", filepath.Join(root, "workspace", "abs-link")))
	must(os.Symlink("../../../../../../../proc/1", filepath.Join(root, "workspace", "climb")))
	must(os.Symlink("/proc/self/root", filepath.Join(root, "workspace", "magic")))
	must(syscall.Mkfifo(filepath.Join(root, "workspace", "fifo"), 0o644))
	// A mount inside the stand-in root is not possible without privileges;
	// /proc reached through a symlink that leaves it shows the same thing.
	must(os.Symlink("/proc", filepath.Join(root, "proc")))

	for _, p := range []string{"/workspace/sub/data.txt", "/workspace/rel-link", "/workspace/up-and-back/data.txt"} {
		f, st, err := s.openNode(p, false)
		if err != nil {
			t.Errorf("openNode(%s): %v", p, err)
			continue
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if string(b) != "data" || st.Size != 4 {
			t.Errorf("openNode(%s) read %q", p, b)
		}
	}
	refused := map[string]string{
		"/workspace/abs-link":      "leaves the sandbox's filesystem",
		"/workspace/climb/environ": "leaves the sandbox's filesystem",
		"/workspace/magic/etc":     "leaves the sandbox's filesystem",
		"/proc/self/environ":       "leaves the sandbox's filesystem",
		"/workspace/fifo":          "not a regular file (it is a FIFO)",
		"/workspace/sub":           "is a directory",
	}
	for p, want := range refused {
		start := time.Now()
		f, _, err := s.openNode(p, false)
		if f != nil {
			f.Close()
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("openNode(%s) = %v; want invalid argument with %q", p, err, want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("openNode(%s) took %s", p, d)
		}
	}
	if _, _, err := s.openNode("/workspace/fifo", true); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("listing a FIFO: %v", err)
	}
	if d, _, err := s.openNode("/workspace/up-and-back", true); err != nil {
		t.Errorf("listing through an in-root symlink: %v", err)
	} else {
		d.Close()
	}
	if _, _, err := s.openNode("/workspace/missing", false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing file: %v", err)
	}
}

// TestOpenKernelLogReplacesPlants: whatever stands where the kernels' log
// goes is replaced by a fresh regular file, never opened through.
func TestOpenKernelLogReplacesPlants(t *testing.T) {
	s, root := testServer(t)
	dir := filepath.Join(root, strings.TrimPrefix(kernelRuntimeDir, "/"))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, kernelLogName)
	target := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(target, []byte("victim"), 0o644); err != nil {
		t.Fatal(err)
	}
	plants := map[string]func() error{
		"symlink":   func() error { return os.Symlink(target, log) },
		"FIFO":      func() error { return syscall.Mkfifo(log, 0o600) },
		"hard link": func() error { return os.Link(target, log) },
		"nothing":   func() error { return nil },
	}
	for name, plant := range plants {
		t.Run(name, func(t *testing.T) {
			os.Remove(log)
			if err := plant(); err != nil {
				t.Fatal(err)
			}
			f, err := s.openKernelLog()
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("kernel output\n")
			f.Close()
			var st unix.Stat_t
			if err := unix.Lstat(log, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
				t.Fatalf("log is mode %o with %d links, %v", st.Mode, st.Nlink, err)
			}
			if b, _ := os.ReadFile(target); string(b) != "victim" {
				t.Fatalf("the planted target was written: %q", b)
			}
		})
	}
	// A regular log of the user's is kept and appended to, without O_NONBLOCK.
	f, err := s.openKernelLog()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK != 0 || fl&unix.O_APPEND == 0 {
		t.Errorf("log flags %#x, %v", fl, err)
	}
	if b, _ := os.ReadFile(log); string(b) != "kernel output\n" {
		t.Errorf("log holds %q", b)
	}
}

// TestEnsureWorkDirAndKernelDir: the agent's own directories are made
// without following what an image or snapshot planted.
func TestEnsureWorkDirAndKernelDir(t *testing.T) {
	s, root := testServer(t)
	s.cfg.WorkDir = "/home/user/work"
	s.ensureWorkDir()
	if st, err := os.Lstat(filepath.Join(root, "home/user/work")); err != nil || !st.IsDir() {
		t.Fatalf("workdir not made: %v", err)
	}

	elsewhere := t.TempDir()
	s2, root2 := testServer(t)
	if err := os.Symlink(elsewhere, filepath.Join(root2, "workspace")); err != nil {
		t.Fatal(err)
	}
	s2.cfg.WorkDir = "/workspace/project"
	s2.ensureWorkDir()
	if _, err := os.Stat(filepath.Join(elsewhere, "project")); err == nil {
		t.Fatal("the workdir was made through a symlink")
	}

	// A symlink where the kernels' directory goes is replaced by a directory.
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	kd := filepath.Join(root, strings.TrimPrefix(kernelRuntimeDir, "/"))
	if err := os.Symlink(elsewhere, kd); err != nil {
		t.Fatal(err)
	}
	if err := s.prepareKernelDir(); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(kd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o777 != 0o700 || int(st.Uid) != s.cfg.UID {
		t.Fatalf("kernels' dir: mode %o uid %d, %v", st.Mode, st.Uid, err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("the symlink's target was written: %v", entries)
	}
}

// TestOpenSpecFile: kernel discovery's opener refuses devices, FIFOs, magic
// links and procfs files without blocking, and opens plain specs.
func TestOpenSpecFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "kernel.json")
	if err := os.WriteFile(good, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	memLink := filepath.Join(dir, "mem")
	if err := os.Symlink("/proc/self/mem", memLink); err != nil {
		t.Fatal(err)
	}
	fdLink := filepath.Join(dir, "fd0")
	if err := os.Symlink("/proc/self/fd/0", fdLink); err != nil {
		t.Fatal(err)
	}
	if f, err := openSpecFile(good, false); err != nil {
		t.Errorf("plain spec: %v", err)
	} else {
		f.Close()
	}
	for name, want := range map[string]string{
		fifo:         "FIFO, not a regular file",
		"/dev/zero":  "character device, not a regular file",
		memLink:      "kernel pseudo filesystem",
		fdLink:       "too many levels of symbolic links", // a magic link
		"/proc/self": "directory, not a regular file",
	} {
		start := time.Now()
		f, err := openSpecFile(name, false)
		if f != nil {
			f.Close()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("openSpecFile(%s) = %v; want %q", name, err, want)
		}
		if time.Since(start) > 2*time.Second {
			t.Errorf("openSpecFile(%s) blocked", name)
		}
	}
	if _, err := openSpecFile(fifo, true); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("a FIFO as a kernels directory: %v", err)
	}
	if _, err := openSpecFile("/proc/self", true); err == nil || !strings.Contains(err.Error(), "pseudo filesystem") {
		t.Errorf("procfs as a kernels directory: %v", err)
	}
}
