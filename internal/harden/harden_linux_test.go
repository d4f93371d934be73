//go:build !forkbox_agent

package harden

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Apply cannot be undone, so TestApply runs every case in a child: the test
// binary re-executes itself with -test.run=^TestHelperProcess$ and envCase
// naming the case. The child (root, in its own mount namespace, so a mount
// that slipped through would not touch the host) checks what it can before
// Apply as a control, calls Apply and checks again, often through
// grandchildren started with os/exec as uid 1000 or 0 that run the same
// binary as probes and print what they saw as key=value words.
const (
	envCase = "FORKBOX_HARDEN_CASE" // helper case or probe to run
	envDir  = "FORKBOX_HARDEN_DIR"  // world-readable dir with the helper binary
	helper  = "harden.test"         // helper binary's name in envDir

	envProbeDir = "FORKBOX_HARDEN_PROBE_DIR" // a directory uid 1000 may write to

	userID = 1000

	exitSkip = 3 // a case's exit code for "cannot be checked here"
)

// cases are the checks TestApply runs, one subtest and one child each.
var cases = map[string]func() error{
	"mount":            caseMount,
	"unshare-newuser":  caseNewUser,
	"clone-namespaces": caseCloneNamespaces,
	"clone3-enosys":    caseClone3,
	"ptrace":           casePtrace,
	"raw-socket":       caseRawSocket,
	"status":           caseStatus,
	"exec":             caseExec,
	"glibc-fallback":   caseGlibcFallback,
	"refused-calls":    caseRefusedCalls,
	"personality":      casePersonality,
	"foreign-arch":     caseForeignArch,
	"sockets":          caseSockets,
	"mknod":            caseMknod,
	"programs":         casePrograms,
	"python-pandas":    casePandas,
	"build":            caseBuild,
	"cgo-refused":      caseCgoRefused,
}

// probes run in grandchildren, which inherit the hardening, and print
// key=result words (result is "ok" or an errno name).
var probes = map[string]func() string{
	"probe-newuser": func() string {
		return "unshare=" + result(runTrue(&syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWUSER})) +
			" clone=" + result(runTrue(&syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}))
	},
	"probe-rawsock": func() string { return "rawsock=" + result(rawSocket()) },
	"probe-exec":    func() string { return "exec=" + result(runTrue(nil)) },
	"probe-clone3":  func() string { return "clone3=" + result(clone3()) },
	"probe-ptrace":  func() string { return "ptrace=" + result(ptraceChild()) },
	"probe-sockets": func() string { return words(socketResults()) },
	"probe-mknod":   func() string { return words(mknodResults(os.Getenv(envProbeDir))) },
	"probe-program": func() string { return "program=" + result(goProgram()) },
	"probe-build":   buildProbe,
}

func TestHelperProcess(t *testing.T) {
	name := os.Getenv(envCase)
	if name == "" {
		t.Skip("runs only as a child process of TestApply")
	}
	if strings.HasPrefix(name, benchPrefix) {
		benchChild(name)
	}
	if p, ok := probes[name]; ok {
		fmt.Println(p())
		os.Exit(0)
	}
	c, ok := cases[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown helper case %q\n", name)
		os.Exit(2)
	}
	var skip skipError
	switch err := c(); {
	case errors.As(err, &skip):
		fmt.Fprintln(os.Stderr, "skip:", skip.msg)
		os.Exit(exitSkip)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func TestApply(t *testing.T) {
	requireRoot(t)
	dir := helperDir(t)
	names := make([]string, 0, len(cases))
	for name := range cases {
		if name != "cgo-refused" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { runChild(t, filepath.Join(dir, helper), dir, name) })
	}
}

// TestApplyRefusesCgo checks that Apply in a cgo binary, such as the test
// binary under -race, fails and changes nothing.
func TestApplyRefusesCgo(t *testing.T) {
	requireRoot(t)
	if !cgoLinked() {
		t.Skip("test binary is built without cgo; run with -race (or CGO_ENABLED=1 and cgo linked) to check this")
	}
	runChild(t, os.Args[0], t.TempDir(), "cgo-refused")
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the checks mount, ptrace and start processes as uid 1000 (CI runs them as root)")
	}
}

// cgoLinked reports whether AllThreadsSyscall, and so Apply, is unavailable.
func cgoLinked() bool {
	_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0)
	return errno == syscall.ENOTSUP
}

// helperDir makes a world-readable directory (uid 1000 must exec the helper
// from it) holding a copy of this test binary, or when the test binary is
// linked with cgo, as under -race, a CGO_ENABLED=0 build of it.
func helperDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "forkbox-harden-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, helper)
	if !cgoLinked() {
		if err := copyFile(os.Args[0], bin); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// go test puts its own go first on the PATH of the test binary.
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the test binary is linked with cgo (AllThreadsSyscall unsupported, e.g. -race), and no go command builds a CGO_ENABLED=0 helper: %v", err)
	}
	cmd := exec.Command(goTool, "test", "-c", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the test binary is linked with cgo (AllThreadsSyscall unsupported, e.g. -race), and building a CGO_ENABLED=0 helper failed: %v\n%s", err, out)
	}
	return dir
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func runChild(t *testing.T, bin, dir, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envCase+"="+name, envDir+"="+dir)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNS, // Go makes "/" private in it
		Setsid:       true,                // no controlling terminal for vhangup
		Pdeathsig:    syscall.SIGKILL,
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() == exitSkip:
		t.Skipf("%s", bytes.TrimSpace(out))
	default:
		t.Fatalf("case %s: %v\n%s", name, err, out)
	}
}

// --- helpers used inside the child and grandchildren ---

type skipError struct{ msg string }

func (s skipError) Error() string { return "skip: " + s.msg }

func skipf(format string, args ...any) error { return skipError{fmt.Sprintf(format, args...)} }

func apply() error {
	if err := Apply(); err != nil {
		return fmt.Errorf("Apply: %w", err)
	}
	return nil
}

// result renders an error as a probe result: "ok", an errno name or text.
func result(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno):
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
		return strconv.Itoa(int(errno))
	default:
		return strings.ReplaceAll(err.Error(), " ", "_")
	}
}

// expect compares results with the wanted ones, all named in one error.
func expect(what string, got, want map[string]string) error {
	var bad []string
	for k, w := range want {
		if got[k] != w {
			bad = append(bad, fmt.Sprintf("%s=%s (want %s)", k, got[k], w))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("%s: %s", what, strings.Join(bad, ", "))
	}
	return nil
}

func kv(pairs ...string) map[string]string {
	m := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return m
}

func credential(uid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
}

// probe runs a probe in a grandchild as uid and returns what it printed.
func probe(uid int, name string) (map[string]string, error) {
	cmd := exec.Command(filepath.Join(os.Getenv(envDir), helper), "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envCase+"="+name)
	cmd.Dir = "/"
	cmd.SysProcAttr = credential(uid)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s as uid %d: %v: %s", name, uid, err, stderr.Bytes())
	}
	m := map[string]string{}
	for _, w := range strings.Fields(string(out)) {
		k, v, _ := strings.Cut(w, "=")
		m[k] = v
	}
	return m, nil
}

// probeExpect runs a probe as uid and compares its results with want.
func probeExpect(uid int, name string, want map[string]string) error {
	got, err := probe(uid, name)
	if err != nil {
		return err
	}
	return expect(fmt.Sprintf("%s as uid %d", name, uid), got, want)
}

func runTrue(attr *syscall.SysProcAttr) error {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = attr
	return cmd.Run()
}

func rawSocket() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// clone3 calls clone3(NULL, 0): EINVAL from the kernel, ENOSYS from the filter.
func clone3() error {
	_, _, errno := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return errors.New("clone3(NULL, 0) succeeded")
}

// ptraceChild starts a sleep with the caller's uid and tries to attach to it,
// which the kernel allows between processes of one uid.
func ptraceChild() error {
	sleep := exec.Command("/bin/sleep", "60")
	if err := sleep.Start(); err != nil {
		return err
	}
	defer sleep.Wait()
	defer sleep.Process.Kill()
	return ptraceAttach(sleep.Process.Pid)
}

// ptraceAttach attaches to pid and, if that works, detaches again at once.
func ptraceAttach(pid int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		return err
	}
	var ws unix.WaitStatus
	unix.Wait4(pid, &ws, unix.WALL, nil)
	return unix.PtraceDetach(pid)
}

func hasCap(c int) (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, err
	}
	return data[c/32].Effective&(1<<(c%32)) != 0, nil
}

// status reads the fields of a /proc/<pid>/status file.
func status(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseStatus(b), nil
}

func parseStatus(b []byte) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(line, ":")
		m[k] = strings.TrimSpace(v)
	}
	return m
}

// --- the cases ---

func caseMount() error {
	target, err := os.MkdirTemp("", "mnt")
	if err != nil {
		return err
	}
	defer os.Remove(target)
	// Control: the child is root with CAP_SYS_ADMIN in a mount namespace of
	// its own, so the mount works until Apply.
	if err := unix.Mount("tmpfs", target, "tmpfs", 0, ""); err != nil {
		return fmt.Errorf("control mount before Apply: %w", err)
	}
	if err := unix.Unmount(target, 0); err != nil {
		return err
	}
	if err := apply(); err != nil {
		return err
	}
	if ok, err := hasCap(unix.CAP_SYS_ADMIN); err != nil || !ok {
		return fmt.Errorf("CAP_SYS_ADMIN not kept in the effective set after Apply (%v)", err)
	}
	err = unix.Mount("tmpfs", target, "tmpfs", 0, "")
	if err == nil {
		unix.Unmount(target, 0)
	}
	return expect("after Apply", kv("mount", result(err)), kv("mount", "EPERM"))
}

func caseNewUser() error {
	// Control: without the filter uid 1000 may create a user namespace.
	got, err := probe(userID, "probe-newuser")
	if err != nil {
		return err
	}
	if got["unshare"] != "ok" || got["clone"] != "ok" {
		return skipf("uid %d cannot create user namespaces even before Apply (%v)", userID, got)
	}
	if err := apply(); err != nil {
		return err
	}
	// Directly in the (multi-threaded) child the kernel would say EINVAL.
	if err := expect("unshare(CLONE_NEWUSER) in the hardened root process",
		kv("unshare", result(unix.Unshare(unix.CLONE_NEWUSER))), kv("unshare", "EPERM")); err != nil {
		return err
	}
	want := kv("unshare", "EPERM", "clone", "EPERM")
	return errors.Join(probeExpect(0, "probe-newuser", want), probeExpect(userID, "probe-newuser", want))
}

func caseCloneNamespaces() error {
	flags := map[string]uintptr{
		"newns": unix.CLONE_NEWNS, "newpid": unix.CLONE_NEWPID, "newnet": unix.CLONE_NEWNET,
		"newipc": unix.CLONE_NEWIPC, "newuts": unix.CLONE_NEWUTS, "newcgroup": unix.CLONE_NEWCGROUP,
	}
	try := func() map[string]string {
		got := map[string]string{}
		for name, f := range flags {
			got[name] = result(runTrue(&syscall.SysProcAttr{Cloneflags: f}))
		}
		return got
	}
	all := func(v string) map[string]string {
		m := map[string]string{}
		for name := range flags {
			m[name] = v
		}
		return m
	}
	if err := expect("control before Apply (root)", try(), all("ok")); err != nil {
		return err
	}
	if err := apply(); err != nil {
		return err
	}
	return expect("after Apply (root)", try(), all("EPERM"))
}

func caseClone3() error {
	if got := result(clone3()); got != "EINVAL" {
		return skipf("clone3(NULL, 0) before Apply gave %s, not EINVAL; the kernel lacks clone3?", got)
	}
	if err := apply(); err != nil {
		return err
	}
	want := kv("clone3", "ENOSYS")
	return errors.Join(
		expect("hardened root process", kv("clone3", result(clone3())), want),
		probeExpect(userID, "probe-clone3", want))
}

func casePtrace() error {
	// Control: uid 1000 may trace its own processes before Apply.
	if err := probeExpect(userID, "probe-ptrace", kv("ptrace", "ok")); err != nil {
		return skipf("control before Apply: %v", err)
	}
	if err := apply(); err != nil {
		return err
	}
	if ok, err := hasCap(unix.CAP_SYS_PTRACE); err != nil || !ok {
		return fmt.Errorf("CAP_SYS_PTRACE not kept after Apply (%v)", err)
	}
	// The hardened child keeps CAP_SYS_PTRACE, so only the filter stops it
	// from attaching to its parent, the test process.
	return errors.Join(
		expect("root attaching to its parent", kv("ptrace", result(ptraceAttach(os.Getppid()))), kv("ptrace", "EPERM")),
		probeExpect(userID, "probe-ptrace", kv("ptrace", "EPERM")))
}

func caseRawSocket() error {
	// Control: before Apply a root grandchild gets CAP_NET_RAW.
	if err := probeExpect(0, "probe-rawsock", kv("rawsock", "ok")); err != nil {
		return fmt.Errorf("control before Apply: %w", err)
	}
	if err := apply(); err != nil {
		return err
	}
	want := kv("rawsock", "EPERM")
	return errors.Join(
		// The agent itself keeps CAP_NET_RAW; raw sockets are not filtered.
		expect("hardened root process", kv("rawsock", result(rawSocket())), kv("rawsock", "ok")),
		// Its children, even as root, have no capabilities.
		probeExpect(0, "probe-rawsock", want),
		probeExpect(userID, "probe-rawsock", want))
}

func caseStatus() error {
	// Give Apply an inheritable and an ambient capability to clear, on all
	// threads, and make sure there are several threads.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Inheritable |= 1 << unix.CAP_NET_RAW
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("setting up an inheritable capability: %w", e)
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, unix.CAP_NET_RAW); e != 0 {
		return fmt.Errorf("setting up an ambient capability: %w", e)
	}
	stop := make(chan struct{})
	defer close(stop)
	for range 4 {
		go func() {
			runtime.LockOSThread()
			<-stop
		}()
	}
	before, err := status("/proc/self/status")
	if err != nil {
		return err
	}
	if before["CapAmb"] == "0000000000000000" || before["CapInh"] == "0000000000000000" {
		return fmt.Errorf("setup: CapAmb %s CapInh %s", before["CapAmb"], before["CapInh"])
	}

	if err := apply(); err != nil {
		return err
	}

	const zero = "0000000000000000"
	var errs []error
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) < 2 {
		return fmt.Errorf("want several threads, found %v (%v)", tasks, err)
	}
	for _, task := range tasks {
		got, err := status(task)
		if err != nil {
			return err
		}
		errs = append(errs, expect("hardened process "+task, got, kv(
			"NoNewPrivs", "1", "Seccomp", "2",
			"CapBnd", zero, "CapInh", zero, "CapAmb", zero,
			"CapEff", before["CapEff"], "CapPrm", before["CapPrm"])))
	}
	for _, uid := range []int{userID, 0} {
		cmd := exec.Command("/bin/cat", "/proc/self/status")
		cmd.SysProcAttr = credential(uid)
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("cat as uid %d: %w", uid, err)
		}
		errs = append(errs, expect(fmt.Sprintf("child as uid %d", uid), parseStatus(out), kv(
			"NoNewPrivs", "1", "Seccomp", "2",
			"CapBnd", zero, "CapEff", zero, "CapPrm", zero, "CapInh", zero, "CapAmb", zero)))
	}
	return errors.Join(errs...)
}

func caseExec() error {
	if err := apply(); err != nil {
		return err
	}
	// os/exec from the hardened root process, as root and as uid 1000.
	errs := []error{
		expect("os/exec of /bin/true as root", kv("exec", result(runTrue(nil))), kv("exec", "ok")),
		expect("os/exec of /bin/true as uid 1000", kv("exec", result(runTrue(credential(userID)))), kv("exec", "ok")),
		// os/exec inside a hardened uid 1000 Go process.
		probeExpect(userID, "probe-exec", kv("exec", "ok")),
	}
	// Go got a pidfd for the child: clone(CLONE_PIDFD) passed the filter.
	sleep := exec.Command("/bin/sleep", "60")
	if err := sleep.Start(); err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer sleep.Wait()
	defer sleep.Process.Kill()
	if !hasPidfd(sleep.Process.Pid) {
		errs = append(errs, fmt.Errorf("os.StartProcess holds no pidfd for pid %d", sleep.Process.Pid))
	}
	return errors.Join(errs...)
}

// hasPidfd reports whether the process holds a pidfd for pid.
func hasPidfd(pid int) bool {
	infos, _ := filepath.Glob("/proc/self/fdinfo/*")
	for _, p := range infos {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), fmt.Sprintf("\nPid:\t%d\n", pid)) {
			return true
		}
	}
	return false
}

// caseGlibcFallback checks that glibc's pthread_create and posix_spawn, which
// try clone3 first, fall back to clone under the filter.
func caseGlibcFallback() error {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		return skipf("%s not installed: %v", python, err)
	}
	if err := apply(); err != nil {
		return err
	}
	cmd := exec.Command(python, "-c", `
import subprocess, threading
t = threading.Thread(target=lambda: None); t.start(); t.join()
subprocess.run(["/bin/true"], check=True)
print("ok")`)
	cmd.SysProcAttr = credential(userID)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		return fmt.Errorf("python threads and subprocess as uid %d: %v\n%s", userID, err, out)
	}
	return nil
}

func casePersonality() error {
	if err := apply(); err != nil {
		return err
	}
	// From <linux/personality.h>.
	const perLinux, addrNoRandomize, readImpliesExec = 0x0, 0x0040000, 0x0400000
	call := func(p uintptr) string {
		_, _, errno := unix.Syscall(unix.SYS_PERSONALITY, p, 0, 0)
		if errno != 0 {
			return result(errno)
		}
		return "ok"
	}
	return expect("personality after Apply", kv(
		"query", call(0xffffffff),
		"linux", call(perLinux),
		"addr_no_randomize", call(addrNoRandomize),
		"read_implies_exec", call(readImpliesExec),
	), kv("query", "ok", "linux", "ok", "addr_no_randomize", "EPERM", "read_implies_exec", "EPERM"))
}

// caseForeignArch runs two tiny programs that call exit(42) with int 0x80,
// the i386 system call entry: a 32-bit one, and a 64-bit one (the way a
// 64-bit process reaches i386 calls). Each exits 42 before Apply and is
// killed by SIGSYS after. Kernels with 32-bit emulation off refuse the
// first (ENOEXEC) and kill the second with SIGSEGV before any filter runs.
func caseForeignArch() error {
	progs := []struct {
		name string
		elf  []byte
	}{
		{"exit42-i386", i386ExitELF(42)},
		{"exit42-int80-x86_64", int80ExitELF(42)},
	}
	var runnable, why []string
	for _, p := range progs {
		path := filepath.Join(os.Getenv(envDir), p.name)
		if err := os.WriteFile(path, p.elf, 0o755); err != nil {
			return err
		}
		err := exec.Command(path).Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit) && exit.ExitCode() == 42:
			runnable = append(runnable, path)
		case errors.Is(err, syscall.ENOEXEC):
			why = append(why, p.name+": "+err.Error())
		case errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGSEGV:
			why = append(why, p.name+": "+err.Error())
		default:
			return fmt.Errorf("control before Apply: %s gave %v, want exit status 42", p.name, err)
		}
	}
	if len(runnable) == 0 {
		return skipf("this kernel runs no i386 calls (32-bit emulation off? %s); TestProgram covers the filter's i386 branch", strings.Join(why, "; "))
	}
	if err := apply(); err != nil {
		return err
	}
	var errs []error
	for _, path := range runnable {
		cmd := exec.Command(path)
		cmd.SysProcAttr = credential(userID)
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGSYS {
			errs = append(errs, fmt.Errorf("%s after Apply: %v, want killed by SIGSYS", filepath.Base(path), err))
		}
	}
	return errors.Join(errs...)
}

// int80ExitELF returns a static x86-64 ELF executable that does exit(code)
// through int 0x80, and exit(1) through syscall should int 0x80 return.
func int80ExitELF(code byte) []byte {
	const base, ehsize, phsize = 0x400000, 64, 56
	text := []byte{
		0xb8, 1, 0, 0, 0, // mov eax, 1 (i386 exit)
		0xbb, code, 0, 0, 0, // mov ebx, code
		0xcd, 0x80, // int 0x80
		0xb8, 60, 0, 0, 0, // mov eax, 60 (x86-64 exit)
		0xbf, 1, 0, 0, 0, // mov edi, 1
		0x0f, 0x05, // syscall
	}
	size := uint64(ehsize + phsize + len(text))
	le := binary.LittleEndian
	b := []byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* LE */, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	b = le.AppendUint16(b, 2)  // ET_EXEC
	b = le.AppendUint16(b, 62) // EM_X86_64
	b = le.AppendUint32(b, 1)  // EV_CURRENT
	b = le.AppendUint64(b, base+ehsize+phsize)
	b = le.AppendUint64(b, ehsize) // e_phoff
	b = le.AppendUint64(b, 0)      // e_shoff
	b = le.AppendUint32(b, 0)      // e_flags
	b = le.AppendUint16(b, ehsize)
	b = le.AppendUint16(b, phsize)
	b = le.AppendUint16(b, 1) // e_phnum
	b = le.AppendUint16(b, 0) // e_shentsize
	b = le.AppendUint16(b, 0) // e_shnum
	b = le.AppendUint16(b, 0) // e_shstrndx
	b = le.AppendUint32(b, 1) // PT_LOAD
	b = le.AppendUint32(b, 5) // PF_R|PF_X
	b = le.AppendUint64(b, 0) // p_offset
	b = le.AppendUint64(b, base)
	b = le.AppendUint64(b, base)
	b = le.AppendUint64(b, size) // p_filesz
	b = le.AppendUint64(b, size) // p_memsz
	b = le.AppendUint64(b, 0x1000)
	return append(b, text...)
}

// i386ExitELF returns a static 32-bit x86 ELF executable that does
// exit(code) through int 0x80.
func i386ExitELF(code byte) []byte {
	const base, ehsize, phsize = 0x08048000, 52, 32
	text := []byte{
		0xb8, 1, 0, 0, 0, // mov eax, 1 (exit)
		0xbb, code, 0, 0, 0, // mov ebx, code
		0xcd, 0x80, // int 0x80
	}
	size := uint32(ehsize + phsize + len(text))
	le := binary.LittleEndian
	b := []byte{0x7f, 'E', 'L', 'F', 1 /* 32-bit */, 1 /* LE */, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	b = le.AppendUint16(b, 2) // ET_EXEC
	b = le.AppendUint16(b, 3) // EM_386
	b = le.AppendUint32(b, 1) // EV_CURRENT
	b = le.AppendUint32(b, base+ehsize+phsize)
	b = le.AppendUint32(b, ehsize) // e_phoff
	b = le.AppendUint32(b, 0)      // e_shoff
	b = le.AppendUint32(b, 0)      // e_flags
	b = le.AppendUint16(b, ehsize)
	b = le.AppendUint16(b, phsize)
	b = le.AppendUint16(b, 1) // e_phnum
	b = le.AppendUint16(b, 0) // e_shentsize
	b = le.AppendUint16(b, 0) // e_shnum
	b = le.AppendUint16(b, 0) // e_shstrndx
	b = le.AppendUint32(b, 1) // PT_LOAD
	b = le.AppendUint32(b, 0) // p_offset
	b = le.AppendUint32(b, base)
	b = le.AppendUint32(b, base)
	b = le.AppendUint32(b, size) // p_filesz
	b = le.AppendUint32(b, size) // p_memsz
	b = le.AppendUint32(b, 5)    // PF_R|PF_X
	b = le.AppendUint32(b, 0x1000)
	return append(b, text...)
}

// caseCgoRefused runs in the cgo-linked test binary itself.
func caseCgoRefused() error {
	err := Apply()
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		return fmt.Errorf("Apply in a cgo binary: %v, want an error naming CGO_ENABLED=0", err)
	}
	got, err := status("/proc/self/status")
	if err != nil {
		return err
	}
	if got["NoNewPrivs"] != "0" || got["Seccomp"] != "0" || got["CapBnd"] == "0000000000000000" {
		return fmt.Errorf("failed Apply changed the process: NoNewPrivs %s Seccomp %s CapBnd %s",
			got["NoNewPrivs"], got["Seccomp"], got["CapBnd"])
	}
	return nil
}
