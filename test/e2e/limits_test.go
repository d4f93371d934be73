package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// Host-level bounds (issue 13, item 7): no sandbox may take a host-wide
// table (open files, PIDs), ask for more memory, CPUs or disk than the host
// has, or promise more disk than is free; image imports and builds are
// bounded in size, expansion and files.

// createRaw posts a create request and decodes the error answer, if any.
func createRaw(t *testing.T, d *daemon, req api.CreateSandboxRequest) (int, api.ErrorBody, *api.Sandbox) {
	t.Helper()
	status, raw := postJSON(t, d, "/v1/sandboxes", req)
	if status == 201 {
		var sb api.Sandbox
		if err := json.Unmarshal(raw, &sb); err != nil {
			t.Fatalf("create answer %s: %v", raw, err)
		}
		t.Cleanup(func() { d.c.DeleteSandbox(context.Background(), sb.ID) })
		return status, api.ErrorBody{}, &sb
	}
	var e api.Error
	json.Unmarshal(raw, &e)
	return status, e.Error, nil
}

var atMostRE = regexp.MustCompile(`at most (\d+) for one sandbox`)

// hostBound is the bound the 400 message names ("at most N for one sandbox").
func hostBound(t *testing.T, msg string) int64 {
	t.Helper()
	m := atMostRE.FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("the message names no bound: %q", msg)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

func procInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func memTotalMiB(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb >> 10
		}
	}
	t.Fatal("no MemTotal")
	return 0
}

// freeMiB is the free space (for unprivileged use) of dir's filesystem.
func freeMiB(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize >> 20
}

// TestLimitsBeyondTheHost: limits beyond what this host could ever give one
// sandbox are refused, naming the field, the value and the host's bound.
// On the old main all four were accepted: pids_limit 32768 (this host's
// whole kernel.pid_max), memory_mb 65536 on a 24 GiB host, 64 CPUs on 2, and
// a sparse 1 TiB disk whatever the filesystem had free.
func TestLimitsBeyondTheHost(t *testing.T) {
	needRoot(t)
	before := countSandboxes(t, shared)
	pidMax := procInt(t, "/proc/sys/kernel/pid_max")
	threadsMax := procInt(t, "/proc/sys/kernel/threads-max")
	fileMax := procInt(t, "/proc/sys/fs/file-max")

	status, e, _ := createRaw(t, shared, api.CreateSandboxRequest{PIDsLimit: i64(32768)})
	if status != 400 || e.Code != "invalid_argument" || !strings.HasPrefix(e.Message, "pids_limit: 32768 is more than this host can give one sandbox") {
		t.Fatalf("pids_limit 32768: %d %+v", status, e)
	}
	pids := hostBound(t, e.Message)
	if pids*4 > min(pidMax, threadsMax) || pids*256*4 > fileMax {
		t.Fatalf("pids bound %d: more than a quarter of pid_max %d / threads-max %d, or of file-max %d at 256 files each", pids, pidMax, threadsMax, fileMax)
	}

	status, e, _ = createRaw(t, shared, api.CreateSandboxRequest{MemoryMB: i64(65536)})
	wantMem := fmt.Sprintf("memory_mb: 65536 is more than this host has (%d MiB; at most ", memTotalMiB(t))
	if memTotalMiB(t) < 65536 && (status != 400 || e.Code != "invalid_argument" || !strings.HasPrefix(e.Message, wantMem)) {
		t.Fatalf("memory_mb 65536: %d %+v, want %q…", status, e, wantMem)
	}

	status, e, _ = createRaw(t, shared, api.CreateSandboxRequest{CPUs: f64(64)})
	wantCPU := fmt.Sprintf("cpus: 64 is more than this host has (%d CPUs; at most %d for one sandbox)", goruntime.NumCPU(), goruntime.NumCPU())
	if goruntime.NumCPU() < 64 && (status != 400 || e.Message != wantCPU) {
		t.Fatalf("cpus 64: %d %+v, want %q", status, e, wantCPU)
	}

	status, e, _ = createRaw(t, shared, api.CreateSandboxRequest{DiskMB: i64(1 << 20)})
	if free := freeMiB(t, shared.dataDir); free < 1<<20 {
		if status != 400 || !strings.HasPrefix(e.Message, "disk_mb: 1048576 is more than this host has") {
			t.Fatalf("disk_mb 1 TiB with %d MiB free: %d %+v", free, status, e)
		}
		if bound := hostBound(t, e.Message); bound > free || bound <= 0 {
			t.Fatalf("disk bound %d with %d MiB free", bound, free)
		}
	}
	if n := countSandboxes(t, shared); n != before {
		t.Fatalf("refused creates made %d sandboxes", n-before)
	}

	// At the bound: created, with the bound.
	status, e, sb := createRaw(t, shared, api.CreateSandboxRequest{PIDsLimit: i64(pids)})
	if status != 201 || sb.PIDsLimit != pids {
		t.Fatalf("pids_limit at the bound (%d): %d %+v", pids, status, e)
	}
}

// TestLimitsDiskReservations: a disk is promised in full while its sandbox
// lives (sparse images grow as the sandbox writes), so disks whose sum
// exceeds the free space are refused with 507 until one goes. The sizes
// come from this host's real free space (the bound the daemon names).
// On the old main both sandboxes were created: two sparse disks of 0.6×
// the free space each, so whichever wrote its data second would have
// filled the host's filesystem.
func TestLimitsDiskReservations(t *testing.T) {
	needRoot(t)
	d, err := startDaemon(filepath.Join(t.TempDir(), "disk"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })
	status, e, _ := createRaw(t, d, api.CreateSandboxRequest{DiskMB: i64(1 << 20)})
	if status != 400 {
		t.Skipf("this filesystem has more than 1 TiB free: %d %+v", status, e)
	}
	bound := hostBound(t, e.Message)
	if free := freeMiB(t, d.dataDir); bound > free {
		t.Fatalf("the daemon offers %d MiB with %d MiB free", bound, free)
	}
	if bound < 2048 {
		t.Skipf("only %d MiB for sandboxes here", bound)
	}
	size := bound * 6 / 10
	t.Logf("free for one sandbox: %d MiB; two disks of %d MiB do not fit together", bound, size)

	status, e, a := createRaw(t, d, api.CreateSandboxRequest{DiskMB: i64(size)})
	if status != 201 {
		t.Fatalf("first disk of %d MiB: %d %+v", size, status, e)
	}
	status, e, _ = createRaw(t, d, api.CreateSandboxRequest{DiskMB: i64(size)})
	if status != 507 || e.Code != "insufficient_storage" || !strings.HasPrefix(e.Message, fmt.Sprintf("disk_mb: %d does not fit on this host now", size)) ||
		!strings.Contains(e.Message, "promised to the disks of 1 live sandboxes") {
		t.Fatalf("second disk of %d MiB: %d %+v, want 507 naming the space", size, status, e)
	}
	// The Go SDK sees the kind.
	if _, err := d.c.CreateSandbox(ctxT(t), api.CreateSandboxRequest{DiskMB: i64(size)}); !errors.Is(err, errdefs.ErrInsufficientStorage) {
		t.Fatalf("SDK: %v", err)
	}
	// A small one still fits beside it.
	if status, e, _ := createRaw(t, d, api.CreateSandboxRequest{DiskMB: i64(256)}); status != 201 {
		t.Fatalf("a small disk beside it: %d %+v", status, e)
	}
	if _, err := d.c.DeleteSandbox(ctxT(t), a.ID); err != nil {
		t.Fatal(err)
	}
	if status, e, _ := createRaw(t, d, api.CreateSandboxRequest{DiskMB: i64(size)}); status != 201 {
		t.Fatalf("after deleting the first: %d %+v", status, e)
	}
}

// bombScript fills a sandbox's file table and PID table: it forks until
// fork fails, each child opening /dev/null until its open fails; then it
// kills half of its children and starts threads until that fails. It
// prints a FILES line after the first phase and a THREADS line after the
// second, holding each state for a while so the test can look around.
const bombScript = `
import os, select, signal, threading, time, resource
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
r, w = os.pipe()
children, fork_errno = [], 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        fork_errno = e.errno
        break
    if pid == 0:
        os.close(r)
        n, errno = 0, 0
        try:
            while True:
                os.open('/dev/null', os.O_RDONLY)
                n += 1
        except OSError as e:
            errno = e.errno
        os.write(w, ('%d %d\n' % (n, errno)).encode())
        time.sleep(600)
        os._exit(0)
    children.append(pid)
os.close(w)
files, errnos, got, buf = 0, {}, 0, b''
deadline = time.time() + 60
while got < len(children) and time.time() < deadline:
    if not select.select([r], [], [], 1)[0]:
        continue
    chunk = os.read(r, 65536)
    if not chunk:
        break
    buf += chunk
    *done, buf = buf.split(b'\n')
    for line in done:
        n, e = map(int, line.split())
        files += n
        errnos[e] = errnos.get(e, 0) + 1
        got += 1
print('FILES children=%d fork_errno=%d reported=%d files=%d nofile=%d errnos=%s' % (
    len(children), fork_errno, got, files, hard, ','.join('%d:%d' % kv for kv in sorted(errnos.items()))), flush=True)
time.sleep(HOLD)
for pid in children[: len(children) // 2]:
    os.kill(pid, signal.SIGKILL)
for pid in children[: len(children) // 2]:
    os.waitpid(pid, 0)
stop = threading.Event()
threads, thread_err = 0, ''
while True:
    try:
        threading.Thread(target=stop.wait, daemon=True).start()
        threads += 1
    except Exception as e:
        thread_err = str(e)
        break
print('THREADS threads=%d err=%s' % (threads, thread_err.replace(' ', '_')), flush=True)
time.sleep(600)
`

var kvRE = regexp.MustCompile(`(\w+)=(\S+)`)

func kvs(line string) map[string]string {
	m := map[string]string{}
	for _, kv := range kvRE.FindAllStringSubmatch(line, -1) {
		m[kv[1]] = kv[2]
	}
	return m
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// hostAccountWorks opens 200 files and starts a program as an unprivileged
// host account (root may exceed fs.file-max; host users may not).
func hostAccountWorks(t *testing.T) error {
	t.Helper()
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
		"import subprocess; fds = [open('/dev/null') for _ in range(200)]; subprocess.run(['/bin/true'], check=True); print('ok')")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// sandboxWorks opens 200 files and starts a program in sandbox id.
func sandboxWorks(t *testing.T, d *daemon, id string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := d.c.Exec(ctx, id, api.ExecRequest{Cmd: "python3", Args: []string{"-c",
		"import subprocess; fds = [open('/dev/null') for _ in range(200)]; subprocess.run(['true'], check=True); print('ok')"}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.Stdout != "ok\n" {
		return fmt.Errorf("%+v", res)
	}
	return nil
}

// TestLimitsFileAndPIDTables: one sandbox at the largest pids_limit this
// host allows forks until its PID limit, every process opening files until
// its own limit, then starts threads until the PID limit again. Meanwhile a
// second sandbox and an unprivileged host account still open files and
// start programs, and the host's file table keeps room.
// On the old main the same sandbox inherited the daemon's RLIMIT_NOFILE
// (20000 on this host) for each of up to 32768 processes: it filled the
// whole host file table (2.47 million files, fs.file-max), after which host
// accounts and other sandboxes failed with "Too many open files in system"
// and could not start programs.
func TestLimitsFileAndPIDTables(t *testing.T) {
	needRoot(t)
	fileMax := procInt(t, "/proc/sys/fs/file-max")
	pids := int64(32768) // the largest the API takes, unless this host bounds it lower
	if status, e, _ := createRaw(t, shared, api.CreateSandboxRequest{PIDsLimit: i64(pids)}); status == 400 {
		pids = hostBound(t, e.Message)
	}
	other := newSandbox(t, shared, api.CreateSandboxRequest{})
	bomb := newSandbox(t, shared, api.CreateSandboxRequest{PIDsLimit: i64(pids), MemoryMB: i64(4096)})

	// Safety first: the bomb runs only if each process's open-file limit
	// keeps the sandbox within a quarter of the host's table. Otherwise it
	// would fill the table of this shared machine.
	res := run(t, shared, bomb.ID, "python3", "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[1])")
	nofile := atoi(t, strings.TrimSpace(res.Stdout))
	t.Logf("pids_limit %d, RLIMIT_NOFILE %d: at most %d open files of file-max %d", pids, nofile, pids*nofile, fileMax)
	if pids*nofile > fileMax/4 {
		t.Fatalf("RLIMIT_NOFILE %d × pids_limit %d = %d is more than a quarter of fs.file-max (%d): the runtime does not apply runtime.Limits.NoFile; not running the bomb",
			nofile, pids, pids*nofile, fileMax/4)
	}
	if err := hostAccountWorks(t); err != nil {
		t.Fatalf("before the bomb, the host account fails: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The bomb's output, line by line (sends never block: the test may
	// be gone when the sandbox's deletion ends the call).
	lines := make(chan string, 1024)
	send := func(line string) {
		select {
		case lines <- line:
		default:
		}
	}
	go func() {
		var buf bytes.Buffer
		script := strings.Replace(bombScript, "HOLD", "20", 1)
		shared.c.ExecStream(ctx, bomb.ID, api.ExecRequest{Cmd: "python3", Args: []string{"-c", script}, TimeoutSecs: f64(600)},
			func(b []byte) {
				buf.Write(b)
				for {
					line, err := buf.ReadString('\n')
					if err != nil {
						buf.WriteString(line)
						return
					}
					send(strings.TrimSpace(line))
				}
			}, func(b []byte) { send("STDERR " + strings.TrimSpace(string(b))) })
		close(lines)
	}()
	wait := func(prefix string) map[string]string {
		timeout := time.After(3 * time.Minute)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("the bomb ended before %s", prefix)
				}
				t.Logf("bomb: %s", line)
				if strings.HasPrefix(line, prefix) {
					return kvs(line)
				}
			case <-timeout:
				t.Fatalf("no %s line from the bomb", prefix)
			}
		}
	}

	// Phase 1: every process holds all the files it may.
	f := wait("FILES")
	children, files := atoi(t, f["children"]), atoi(t, f["files"])
	nr := procInt(t, "/proc/sys/fs/file-nr")
	t.Logf("host file table while saturated: %d of %d", nr, fileMax)
	if f["fork_errno"] != "11" || children < pids/2 {
		t.Fatalf("the fork bomb did not run into the PID limit: %v", f)
	}
	if files > fileMax/4 || atoi(t, f["reported"]) < children*9/10 || files < atoi(t, f["reported"])*(nofile-16) {
		t.Fatalf("the processes did not each fill their own limit of %d, or held more than a quarter of file-max: %v", nofile, f)
	}
	if f["errnos"] != "24:"+f["reported"] { // EMFILE, never ENFILE (23, the host's table full)
		t.Fatalf("opens failed with other errors than EMFILE (the process's own limit): %v", f)
	}
	if err := hostAccountWorks(t); err != nil {
		t.Errorf("while the sandbox holds its files, a host account cannot open files or start programs: %v", err)
	}
	if err := sandboxWorks(t, shared, other.ID); err != nil {
		t.Errorf("while the sandbox holds its files, another sandbox cannot: %v", err)
	}

	// Phase 2: the PID table, with threads.
	th := wait("THREADS")
	if atoi(t, th["threads"]) < children/4 {
		t.Fatalf("the thread bomb started few threads: %v", th)
	}
	if err := hostAccountWorks(t); err != nil {
		t.Errorf("while the sandbox holds its PIDs, a host account cannot start programs: %v", err)
	}
	if err := sandboxWorks(t, shared, other.ID); err != nil {
		t.Errorf("while the sandbox holds its PIDs, another sandbox cannot: %v", err)
	}
	if _, err := shared.c.DeleteSandbox(ctxT(t), bomb.ID); err != nil {
		t.Fatalf("delete the bomb: %v", err)
	}
	assertNoLeaks(t, shared, bomb.ID)
	if err := sandboxWorks(t, shared, other.ID); err != nil {
		t.Errorf("after the bomb: %v", err)
	}
}

// imagesCopy makes an images directory of this test's own, holding the
// shared one's images as hard links (no copy of their data), so that a
// daemon on it finds the default image built and the test can tell what
// an import leaves behind from what other tests do.
func imagesCopy(t *testing.T) string {
	t.Helper()
	src := os.Getenv("FORKBOX_IMAGES_DIR")
	dst := filepath.Join(t.TempDir(), "images")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == ".lock" || strings.HasPrefix(e.Name(), ".tmp-") {
			continue
		}
		if out, err := exec.Command("cp", "-al", filepath.Join(src, e.Name()), dst+"/").CombinedOutput(); err != nil {
			t.Fatalf("cp -al %s: %v %s", e.Name(), err, out)
		}
	}
	return dst
}

// imagesListing is what an import or build could leave in an images dir:
// its entries and its layers' (and whether each layer is complete).
func imagesListing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != ".lock" {
			out = append(out, e.Name())
		}
	}
	layers, _ := os.ReadDir(filepath.Join(dir, ".layers"))
	for _, e := range layers {
		state := ""
		if _, err := os.Stat(filepath.Join(dir, ".layers", e.Name(), "layer.json")); err != nil {
			state = " (incomplete)"
		}
		out = append(out, ".layers/"+e.Name()+state)
	}
	sort.Strings(out)
	return out
}

func diff(before, after []string) (added []string) {
	had := map[string]bool{}
	for _, s := range before {
		had[s] = true
	}
	for _, s := range after {
		if !had[s] {
			added = append(added, s)
		}
	}
	return added
}

// ociImage makes an image of uncompressed layer tars (go-containerregistry
// gzips them in the archives it writes).
func ociImage(t *testing.T, layers ...[]byte) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, b := range layers {
		b := b
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func dockerSaveOf(t *testing.T, img v1.Image) []byte {
	t.Helper()
	tag, _ := name.NewTag("example.test/forkbox/limits:latest")
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ociLayoutTar writes img as an OCI layout and packs it as a tar.
func ociLayoutTar(t *testing.T, img v1.Image) []byte {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err = filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	return buf.Bytes()
}

// handDockerArchive is a docker save archive with one uncompressed layer,
// as docker before 25 wrote them.
func handDockerArchive(t *testing.T, layer []byte) []byte {
	t.Helper()
	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{fmt.Sprintf("sha256:%x", sha256.Sum256(layer))}}})
	man, _ := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{"limits:latest"}, "Layers": []string{"l0/layer.tar"}}})
	return tarOfEntries(t, false, map[string][]byte{"l0/layer.tar": layer, "config.json": cfg, "manifest.json": man})
}

// tarOfEntries packs name → content, in name order, optionally gzipped.
func tarOfEntries(t *testing.T, gz bool, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write(files[n])
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func manyEntries(n int) map[string][]byte {
	m := map[string][]byte{}
	for i := 0; i < n; i++ {
		m[fmt.Sprintf("many/f%04d", i)] = nil
	}
	return m
}

// postBuild sends a multipart build with the context bytes as they are.
func postBuild(t *testing.T, d *daemon, hc *http.Client, recipe string, context []byte) (int, api.ErrorBody) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	w, _ := mw.CreateFormField("recipe")
	io.WriteString(w, recipe)
	w, _ = mw.CreateFormFile("context", "context.tar")
	w.Write(context)
	mw.Close()
	resp, err := hc.Post("http://"+d.addr+"/v1/images", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatalf("build: %v; daemon log:\n%s", err, d.logTail())
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e api.Error
	json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Error
}

// TestLimitsImageBounds: imports and builds over each bound stop with 413
// naming the bound (and its flag), and leave nothing in the images dir. A
// daemon with small bounds (1 MiB as sent, 8 MiB expanded, 100 files) and
// its own images dir (hard links of the shared one) runs them.
// On the old main none of these was bounded: the import upload had no
// limit at all, a gzip bomb expanded into the spool and the layer until
// the disk was full, any number of files was extracted, and a build
// context (bounded at 1 GiB as sent) expanded and was copied without bound.
func TestLimitsImageBounds(t *testing.T) {
	needRoot(t)
	imgDir := imagesCopy(t)
	d, err := startDaemon(filepath.Join(t.TempDir(), "bounds"), []string{
		"FORKBOX_IMAGES_DIR=" + imgDir, "FORKBOX_MAX_IMAGE_ARCHIVE_MB=1", "FORKBOX_MAX_IMAGE_EXPANDED_MB=8", "FORKBOX_MAX_IMAGE_FILES=100",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	// A connection per request: a refused upload the server stopped
	// reading is answered and then closed, and a request reusing that
	// connection would meet its end (with EOF) instead of the server.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	c := client.New("http://"+d.addr, client.WithHTTPClient(hc))
	// The default image is there (its layers are cached): the daemon's
	// start-up check of it changes nothing.
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := c.GetImage(ctxT(t), "python"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no python image in the copy; log:\n%s", d.logTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second)
	before := imagesListing(t, imgDir)

	bomb := tarOfEntries(t, false, map[string][]byte{"zeros": make([]byte, 64<<20)}) // gzips to ~64 KB
	bombImage := ociImage(t, bomb)
	for _, ic := range []struct {
		name    string
		archive []byte
		gz      bool
		want    string
	}{
		{"archive as sent", dockerSaveOf(t, ociImage(t, tarOfEntries(t, false, map[string][]byte{"noise": randomBytes(2 << 20)}))), false,
			"image archive: more than 1 MiB as sent, the limit of this daemon (--max-image-archive-mb)"},
		{"gzip bomb in a layer", dockerSaveOf(t, bombImage), false,
			"image layers (together): more than 8 MiB expanded, the limit of this daemon (--max-image-expanded-mb)"},
		{"gzip bomb in a layer after a good one", dockerSaveOf(t, ociImage(t, tarOfEntries(t, false, map[string][]byte{"ok": []byte("fine\n")}), bomb)), false,
			"more than 8 MiB expanded"},
		{"gzip bomb in an OCI layout", ociLayoutTar(t, bombImage), false, "more than 8 MiB expanded"},
		{"gzip bomb around the archive", handDockerArchive(t, bomb), true,
			"image archive: more than 8 MiB expanded, the limit of this daemon (--max-image-expanded-mb)"},
		{"files", dockerSaveOf(t, ociImage(t, tarOfEntries(t, false, manyEntries(200)))), false,
			"image layers (together): more than 100 files, the limit of this daemon (--max-image-files)"},
	} {
		archive := ic.archive
		if ic.gz {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(archive)
			zw.Close()
			archive = buf.Bytes()
		}
		_, err := c.ImportImage(ctxT(t), "limits-import", bytes.NewReader(archive), nil)
		if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), ic.want) {
			t.Errorf("%s (%d bytes sent): %v, want too_large with %q", ic.name, len(archive), err, ic.want)
		}
		if added := diff(before, imagesListing(t, imgDir)); len(added) > 0 {
			t.Errorf("%s left in the images dir: %v", ic.name, added)
		}
	}
	if _, err := c.GetImage(ctxT(t), "limits-import"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a refused import registered an image: %v", err)
	}

	// Builds: the context's files, its expansion, its size as sent, and
	// copy steps together.
	recipe := func(copies ...string) string {
		steps := []string{}
		for _, dest := range copies {
			steps = append(steps, fmt.Sprintf(`{"copy":{"src":"data","dest":%q}}`, dest))
		}
		return fmt.Sprintf(`{"name":"limits-build","base":"python","steps":[%s]}`, strings.Join(steps, ","))
	}
	many := manyEntries(200)
	for _, bc := range []struct {
		name    string
		recipe  string
		context []byte
		want    string
	}{
		{"context files", recipe("/a"), tarOfEntries(t, false, many), "build context: more than 100 files, the limit of this daemon (--max-image-files)"},
		{"context gzip bomb", recipe("/a"), tarOfEntries(t, true, map[string][]byte{"data": make([]byte, 64<<20)}),
			"build context: more than 8 MiB expanded, the limit of this daemon (--max-image-expanded-mb)"},
		{"context as sent", recipe("/a"), tarOfEntries(t, false, map[string][]byte{"data": randomBytes(2 << 20)}),
			"larger than the limit of 1048576 bytes (--max-image-archive-mb)"},
		{"copy steps together", recipe("/a/"+recipeNonce, "/b/"+recipeNonce), tarOfEntries(t, true, map[string][]byte{"data": make([]byte, 5<<20)}),
			"step 2/2 (copy): copy steps (together): more than 8 MiB expanded, the limit of this daemon (--max-image-expanded-mb)"},
	} {
		status, e := postBuild(t, d, hc, bc.recipe, bc.context)
		if status != 413 || e.Code != "too_large" || !strings.Contains(e.Message, bc.want) {
			t.Errorf("%s: %d %+v, want 413 with %q", bc.name, status, e, bc.want)
		}
		// A build keeps the layers of the steps that succeeded (its cache),
		// whole; nothing else.
		for _, a := range diff(before, imagesListing(t, imgDir)) {
			if !strings.HasPrefix(a, ".layers/") || strings.HasSuffix(a, "(incomplete)") || strings.Contains(a, ".tmp-") {
				t.Errorf("%s left in the images dir: %s", bc.name, a)
			}
		}
	}
	if _, err := c.GetImage(ctxT(t), "limits-build"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a refused build registered an image: %v", err)
	}
}
