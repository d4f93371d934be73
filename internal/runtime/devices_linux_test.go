package runtime

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The device tests run probes in a child process (this test binary again,
// running TestDeviceHelperProcess) that the test puts into a throwaway cgroup
// before the child does anything: it blocks reading fd 3 until then.
const (
	deviceProbeEnv  = "FORKBOX_DEVICE_PROBE"  // dir of test nodes: run the probes
	deviceAttachEnv = "FORKBOX_DEVICE_ATTACH" // cgroup2 dir: attach the filter and exit
)

// Nodes the test makes with mknod in a temporary directory: what a process
// could reach if it got a node for them (e.g. through a bind mount or a
// file system it controls). The allowed one shows the check is by device
// number, not by path.
var deviceTestNodes = []struct {
	name         string
	mode         uint32
	major, minor uint32
	allowed      bool
}{
	{"null", unix.S_IFCHR, 1, 3, true},
	{"mem", unix.S_IFCHR, 1, 1, false},
	{"kmsg", unix.S_IFCHR, 1, 11, false},
	{"console", unix.S_IFCHR, 5, 1, false},
	{"tun", unix.S_IFCHR, 10, 200, false},
	{"loop0", unix.S_IFBLK, 7, 0, false},
}

// TestDeviceHelperProcess is not a test: it is the child of the device
// tests, and returns at once when run as a test.
func TestDeviceHelperProcess(t *testing.T) {
	if dir := os.Getenv(deviceAttachEnv); dir != "" {
		if err := attachDeviceFilter(dir); err != nil {
			fmt.Println("attach:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir := os.Getenv(deviceProbeEnv)
	if dir == "" {
		return
	}
	// Wait until the parent has moved this process into the cgroups.
	start := os.NewFile(3, "start")
	var b [1]byte
	if n, _ := start.Read(b[:]); n != 1 {
		fmt.Println("not started")
		os.Exit(3)
	}
	// A fresh directory for the nodes the probes try to make.
	mk, err := os.MkdirTemp(dir, "mknod")
	if err != nil {
		fmt.Println("mkdir:", err)
		os.Exit(1)
	}
	for _, p := range deviceProbes(dir, mk) {
		res := "ok"
		if err := p.run(); err != nil {
			var errno unix.Errno
			if errors.As(err, &errno) {
				res = unix.ErrnoName(errno)
			} else {
				res = strings.ReplaceAll(err.Error(), " ", "_")
			}
		}
		fmt.Printf("probe %s %s\n", p.name, res)
	}
	os.Exit(0)
}

type deviceProbe struct {
	name string
	run  func() error
}

// openProbe opens path and, when io is set, reads or writes a byte, the way
// a program would use the device.
func openProbe(path string, flags int, io func(fd int) error) func() error {
	return func() error {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if io != nil {
			return io(fd)
		}
		return nil
	}
}

func readByte(fd int) error  { _, err := unix.Read(fd, make([]byte, 1)); return err }
func writeByte(fd int) error { _, err := unix.Write(fd, []byte{0}); return err }

// deviceProbes opens devices, and the nodes of deviceTestNodes in dir, and
// tries to make nodes in mk.
func deviceProbes(dir, mk string) []deviceProbe {
	ps := []deviceProbe{
		{"dev-null", openProbe("/dev/null", unix.O_RDWR, writeByte)},
		{"dev-zero", openProbe("/dev/zero", unix.O_RDONLY, readByte)},
		{"dev-full", openProbe("/dev/full", unix.O_RDONLY, readByte)},
		{"dev-random", openProbe("/dev/random", unix.O_RDONLY, readByte)},
		{"dev-urandom", openProbe("/dev/urandom", unix.O_RDWR, readByte)},
		// Without a controlling terminal (the child is a session leader with
		// none) this is ENXIO from the tty layer, past the device check.
		{"dev-tty", openProbe("/dev/tty", unix.O_RDWR, nil)},
		{"dev-ptmx+pts", openPty},
		{"mknod-char-allowed-dev", func() error {
			return unix.Mknod(filepath.Join(mk, "new-null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))
		}},
		{"mknod-block", func() error {
			return unix.Mknod(filepath.Join(mk, "new-loop"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0)))
		}},
		{"mknod-fifo", func() error {
			return unix.Mknod(filepath.Join(mk, "new-fifo"), unix.S_IFIFO|0o600, 0)
		}},
	}
	for _, n := range deviceTestNodes {
		ps = append(ps, deviceProbe{"node-" + n.name, openProbe(filepath.Join(dir, n.name), unix.O_RDONLY|unix.O_NONBLOCK, nil)})
	}
	return ps
}

// openPty opens a new pty master and then its slave, /dev/pts/N (major 136).
func openPty() error {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(m)
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return err
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		return err
	}
	s, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	var st unix.Stat_t
	if err := unix.Fstat(s, &st); err != nil {
		return err
	}
	if unix.Major(st.Rdev) != 136 {
		return fmt.Errorf("pts major %d, the allow-list has 136", unix.Major(st.Rdev))
	}
	return nil
}

// wantProbes is what a process under the allow-list must see.
func wantProbes() map[string]string {
	w := map[string]string{
		"dev-null": "ok", "dev-zero": "ok", "dev-full": "ok", "dev-random": "ok", "dev-urandom": "ok",
		"dev-ptmx+pts":           "ok",
		"mknod-char-allowed-dev": "EPERM",
		"mknod-block":            "EPERM",
		"mknod-fifo":             "ok",
	}
	for _, n := range deviceTestNodes {
		if n.allowed {
			w["node-"+n.name] = "ok"
		} else {
			w["node-"+n.name] = "EPERM"
		}
	}
	return w
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("device cgroup tests need root (cgroups, mknod, bpf)")
	}
}

// makeTestNodes makes the nodes of deviceTestNodes in a temporary directory
// and checks that this (unrestricted) process gets past the device check on
// them, so that an EPERM in the child can only come from its cgroup.
func makeTestNodes(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range deviceTestNodes {
		p := filepath.Join(dir, n.name)
		if err := unix.Mknod(p, n.mode|0o600, int(unix.Mkdev(n.major, n.minor))); err != nil {
			t.Skipf("cannot mknod test device nodes in %s: %v", dir, err)
		}
	}
	for _, name := range []string{"null", "kmsg", "loop0"} {
		fd, err := unix.Open(filepath.Join(dir, name), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		} else if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			t.Skipf("this test process itself may not open %s in %s (%v): nodev mount or a restricted devices cgroup", name, dir, err)
		}
	}
	return dir
}

// testCgroupName is unique per test run.
func testCgroupName() string {
	return fmt.Sprintf("forkbox-devtest-%d-%d", os.Getpid(), time.Now().UnixNano())
}

// makeV1DevicesCgroup makes <devices>/<unique>/sb, like forkbox's
// <devices>/forkbox/<id>, and removes both when the test ends.
func makeV1DevicesCgroup(t *testing.T) string {
	t.Helper()
	root := filepath.Join(cgroupRoot, "devices")
	if _, err := os.Stat(filepath.Join(root, "devices.allow")); err != nil {
		t.Skip("no v1 devices controller on this host")
	}
	parent := filepath.Join(root, testCgroupName())
	dir := filepath.Join(parent, "sb")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rmdirCgroup(t, parent) })
	t.Cleanup(func() { rmdirCgroup(t, dir) })
	return dir
}

// cgroup2Root is the cgroup2 mount: /sys/fs/cgroup on a pure v2 host, the
// unified mount of a hybrid one.
func cgroup2Root() string {
	if cgroupVersion2() {
		return cgroupRoot
	}
	var st unix.Statfs_t
	u := filepath.Join(cgroupRoot, "unified")
	if unix.Statfs(u, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return u
	}
	return ""
}

// makeCgroup2Dir makes <cgroup2>/<unique>/sb and removes both when the test
// ends.
func makeCgroup2Dir(t *testing.T) string {
	t.Helper()
	root := cgroup2Root()
	if root == "" {
		t.Skip("no cgroup2 mount on this host")
	}
	parent := filepath.Join(root, testCgroupName())
	dir := filepath.Join(parent, "sb")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rmdirCgroup(t, parent) })
	t.Cleanup(func() { rmdirCgroup(t, dir) })
	return dir
}

// rmdirCgroup removes a cgroup directory, retrying while its last process
// finishes leaving; a failure is a test failure (it would be a leak).
func rmdirCgroup(t *testing.T, dir string) {
	t.Helper()
	var err error
	for i := 0; i < 100; i++ {
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("remove cgroup %s: %v", dir, err)
}

// runProbes starts the helper child, moves it into every cgroup dir in dirs
// before it does anything, lets it run the probes and returns their results.
func runProbes(t *testing.T, nodes string, dirs ...string) map[string]string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeviceHelperProcess$")
	cmd.Env = append(os.Environ(), deviceProbeEnv+"="+nodes)
	cmd.ExtraFiles = []*os.File{r}
	// A new session, so the child has no controlling terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		r.Close()
		t.Fatal(err)
	}
	r.Close()
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move child into %s: %v", d, err)
		}
	}
	if _, err := w.Write([]byte("g")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	err = cmd.Wait()
	waited = true
	if err != nil {
		t.Fatalf("probe child: %v\n%s", err, out.String())
	}
	got := map[string]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "probe" {
			got[f[1]] = f[2]
		}
	}
	return got
}

// checkProbes compares the child's results with the allow-list's.
func checkProbes(t *testing.T, got map[string]string) {
	t.Helper()
	for name, want := range wantProbes() {
		if got[name] != want {
			t.Errorf("%s: got %q, want %q", name, got[name], want)
		}
	}
	// /dev/tty is allowed; without a controlling terminal the open itself
	// may still fail, but not with the device check's EPERM.
	if tty, ok := got["dev-tty"]; !ok || tty == "EPERM" {
		t.Errorf("dev-tty: got %q, want anything but EPERM (ENXIO without a controlling tty)", tty)
	}
	if t.Failed() {
		t.Logf("all probe results: %v", got)
	}
}

func TestDeviceListTable(t *testing.T) {
	want := []string{"c 1:3 rw", "c 1:5 rw", "c 1:7 rw", "c 1:8 rw", "c 1:9 rw", "c 5:0 rw", "c 5:2 rw", "c 136:* rw"}
	var got []string
	for _, d := range sandboxDevices {
		got = append(got, d.v1Rule())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("v1 rules %q, want %q", got, want)
	}
	rules := deviceRules()
	for i, r := range rules {
		if !r.Allow || strings.ContainsRune(string(r.Permissions), 'm') {
			t.Errorf("rule %d (%s) must allow read/write only", i, r.CgroupString())
		}
		// runc's rule and the v1 line must say the same thing.
		if r.CgroupString() != want[i] {
			t.Errorf("rule %d: runc form %q, v1 form %q", i, r.CgroupString(), want[i])
		}
	}
}

// TestDevicePtsMajor checks the table's pts major against this kernel.
func TestDevicePtsMajor(t *testing.T) {
	b, err := os.ReadFile("/proc/devices")
	if err != nil {
		t.Skip(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[1] == "pts" {
			if f[0] != "136" {
				t.Fatalf("pts major is %s on this kernel, the allow-list has 136", f[0])
			}
			return
		}
	}
	t.Skip("no pts driver in /proc/devices")
}

func TestDeviceRulesV1(t *testing.T) {
	needRoot(t)
	dir := makeV1DevicesCgroup(t)
	nodes := makeTestNodes(t)
	parentList, _ := os.ReadFile(filepath.Join(filepath.Dir(dir), "devices.list"))

	t0 := time.Now()
	if err := setupDevicesV1(dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("setupDevicesV1: %d µs", time.Since(t0).Microseconds())

	// The parent is untouched (still allows all), and the child holds the list.
	if after, _ := os.ReadFile(filepath.Join(filepath.Dir(dir), "devices.list")); !bytes.Equal(after, parentList) {
		t.Errorf("parent's devices.list changed from %q to %q", parentList, after)
	}
	checkProbes(t, runProbes(t, nodes, dir))

	// Again, as an adopting daemon would: nothing changes.
	before, _ := os.ReadFile(filepath.Join(dir, "devices.list"))
	t0 = time.Now()
	if err := setupDevicesV1(dir); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	t.Logf("setupDevicesV1 again (no-op): %d µs", time.Since(t0).Microseconds())
	if after, _ := os.ReadFile(filepath.Join(dir, "devices.list")); !bytes.Equal(before, after) {
		t.Errorf("second setup changed devices.list from %q to %q", before, after)
	}
}

func TestDeviceFilterBPF(t *testing.T) {
	needRoot(t)
	dir := makeCgroup2Dir(t)
	nodes := makeTestNodes(t)

	var memlock, after unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &memlock)
	t0 := time.Now()
	if err := attachDeviceFilter(dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("attachDeviceFilter: %d µs", time.Since(t0).Microseconds())
	_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &after)
	if after != memlock {
		t.Errorf("RLIMIT_MEMLOCK changed from %+v to %+v", memlock, after)
	}
	ids, err := attachedDeviceFilters(dir)
	if err != nil || len(ids) != 1 {
		t.Fatalf("attached device programs: %v %v, want one", ids, err)
	}
	checkProbes(t, runProbes(t, nodes, dir))

	// Removing the cgroup frees the program: nothing is pinned.
	rmdirCgroup(t, dir)
	waitProgGone(t, ids[0])
}

// TestDeviceFilterAcrossRestart attaches the filter from a process that
// then exits (the daemon going away), checks that it still holds, then
// attaches again from here (a restarted daemon adopting the sandbox) and
// checks that the cgroup still has one program, not two.
func TestDeviceFilterAcrossRestart(t *testing.T) {
	needRoot(t)
	dir := makeCgroup2Dir(t)
	nodes := makeTestNodes(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestDeviceHelperProcess$")
	cmd.Env = append(os.Environ(), deviceAttachEnv+"="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("attach from a child: %v\n%s", err, out)
	}
	first, err := attachedDeviceFilters(dir)
	if err != nil || len(first) != 1 {
		t.Fatalf("after the attaching process exited: programs %v %v, want one", first, err)
	}
	checkProbes(t, runProbes(t, nodes, dir))

	prev := first[0]
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		if err := attachDeviceFilter(dir); err != nil {
			t.Fatalf("re-attach %d: %v", i, err)
		}
		t.Logf("re-attach %d: %d µs", i, time.Since(t0).Microseconds())
		ids, err := attachedDeviceFilters(dir)
		if err != nil || len(ids) != 1 {
			t.Fatalf("after re-attach %d: programs %v %v, want one", i, ids, err)
		}
		// The old program was swapped out, and freed.
		if ids[0] == prev {
			t.Errorf("re-attach %d kept program %d", i, prev)
		}
		waitProgGone(t, prev)
		prev = ids[0]
	}
	checkProbes(t, runProbes(t, nodes, dir))
	rmdirCgroup(t, dir)
	waitProgGone(t, prev)
}

// TestDeviceRulesBoth applies applyDeviceRules as a hybrid host's sandbox
// gets it (the child in both cgroups): the v1 controller enforces.
func TestDeviceRulesBoth(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat(filepath.Join(cgroupRoot, "devices", "devices.allow")); err != nil || cgroup2Root() == "" {
		t.Skip("needs a hybrid host (v1 devices controller and a cgroup2 mount)")
	}
	paths := map[string]string{"devices": makeV1DevicesCgroup(t), "unified": makeCgroup2Dir(t)}
	nodes := makeTestNodes(t)
	t0 := time.Now()
	if err := applyDeviceRules(paths); err != nil {
		t.Fatal(err)
	}
	t.Logf("applyDeviceRules (hybrid: v1): %d µs", time.Since(t0).Microseconds())
	checkProbes(t, runProbes(t, nodes, paths["devices"], paths["unified"]))
	if err := applyDeviceRules(paths); err != nil {
		t.Fatalf("again: %v", err)
	}
	// The v1 controller enforces alone on a hybrid host: no BPF program
	// (its load would cost every create milliseconds).
	if ids, err := attachedDeviceFilters(paths["unified"]); err != nil || len(ids) != 0 {
		t.Fatalf("on a hybrid host: programs %v %v, want none", ids, err)
	}
}

func TestDeviceRulesNeedAHierarchy(t *testing.T) {
	if err := applyDeviceRules(map[string]string{"memory": "/nonexistent"}); err == nil {
		t.Fatal("applyDeviceRules without a devices or unified cgroup succeeded; it must fail closed")
	}
}

// waitProgGone waits until no BPF program has id (it is freed shortly after
// its last reference goes).
func waitProgGone(t *testing.T, id uint32) {
	t.Helper()
	attr := struct{ id, next, flags uint32 }{id: id}
	for i := 0; i < 200; i++ {
		fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_GET_FD_BY_ID, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		if errno == unix.ENOENT {
			return
		}
		if errno == 0 {
			unix.Close(int(fd))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("BPF program %d still exists: leaked", id)
}

// BenchmarkDeviceFilterAttach measures the attach on a fresh cgroup, as on
// the create path (the cgroup's mkdir and rmdir are not timed).
func BenchmarkDeviceFilterAttach(b *testing.B) {
	if os.Geteuid() != 0 || cgroup2Root() == "" {
		b.Skip("needs root and a cgroup2 mount")
	}
	benchOnFreshCgroups(b, cgroup2Root(), attachDeviceFilter)
}

// BenchmarkDevicesV1 measures the v1 setup on a fresh cgroup.
func BenchmarkDevicesV1(b *testing.B) {
	root := filepath.Join(cgroupRoot, "devices")
	if _, err := os.Stat(filepath.Join(root, "devices.allow")); os.Geteuid() != 0 || err != nil {
		b.Skip("needs root and a v1 devices controller")
	}
	benchOnFreshCgroups(b, root, setupDevicesV1)
}

// benchOnFreshCgroups times setup on a new cgroup under root per iteration;
// making and removing the cgroup is not timed.
func benchOnFreshCgroups(b *testing.B, root string, setup func(dir string) error) {
	parent := filepath.Join(root, testCgroupName())
	if err := os.Mkdir(parent, 0o755); err != nil {
		b.Fatal(err)
	}
	defer unix.Rmdir(parent)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		dir := filepath.Join(parent, strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		err := setup(dir)
		b.StopTimer()
		unix.Rmdir(dir)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
