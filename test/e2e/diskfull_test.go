package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/diskspace/diskspacetest"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// want507 fails unless err is a 507 insufficient_storage whose message
// names the filesystem at mount and says each of also.
func want507(t *testing.T, op string, err error, mount string, also ...string) string {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusInsufficientStorage || ae.Code != "insufficient_storage" ||
		!errors.Is(err, errdefs.ErrInsufficientStorage) {
		t.Fatalf("%s: %v; want 507 insufficient_storage", op, err)
	}
	msg := ae.Message
	for _, s := range append([]string{"the filesystem at " + mount + " (tmpfs)", " free of "}, also...) {
		if !strings.Contains(msg, s) {
			t.Fatalf("%s: %q does not say %q", op, msg, s)
		}
	}
	// CRIU's log and the tools' output are the daemon's log's, never the
	// answer's.
	for _, s := range []string{"Error (", "criu/", "tar: ", "No space left on device"} {
		if strings.Contains(msg, s) {
			t.Fatalf("%s: the answer carries a tool's output (%q): %s", op, s, msg)
		}
	}
	t.Logf("%s: %s", op, msg)
	return msg
}

// snapshotsLeft lists what is in a daemon's snapshot store (committed
// snapshots and temporary dirs alike).
func snapshotsLeft(t *testing.T, d *daemon) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(d.dataDir, "snapshots"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.Name() == ".intents" { // the store's marks (a fork's): none may be left
			marks, _ := filepath.Glob(filepath.Join(d.dataDir, "snapshots", ".intents", "*", "*"))
			out = append(out, marks...)
			continue
		}
		out = append(out, e.Name())
	}
	return out
}

// freeBytes is what the filesystem holding path has free.
func freeBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// TestDiskFull: a daemon whose data dir is a 512 MiB filesystem of its own
// answers every write that does not fit there with 507
// insufficient_storage naming the filesystem, what was needed and what was
// free: memory checkpoints (refused up front, and one whose disk filled
// while CRIU dumped), suspends and forks of a sandbox holding more memory
// than the disk has room for, a filesystem checkpoint of a sandbox with a
// large file, and chat uploads into a full disk. Each leaves nothing (no
// snapshot dir, temporary or not, no snapshot row, no upload) and the
// sandbox running with its variables. A second daemon whose images dir is a
// 64 MiB filesystem answers a build and an import that do not fit the
// same way. Both keep working afterwards.
func TestDiskFull(t *testing.T) {
	needRoot(t)
	dataDir := diskspacetest.TmpFS(t, 512<<20)
	hold := t.TempDir()
	d, err := startDaemon(dataDir, []string{"FORKBOX_HOLD_DIR=" + hold})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			d.deleteAll()
			d.stop()
		}
	})
	ctx := ctxT(t)
	sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "hungry", MemoryMB: i64(1536), DiskMB: i64(320)})
	code := func(src string) string {
		t.Helper()
		ex, err := d.c.RunCode(ctx, sb.ID, api.RunCodeRequest{Code: src})
		if err != nil {
			t.Fatalf("run %q: %v", src, err)
		}
		if ex.Error != nil {
			t.Fatalf("run %q: %s: %s", src, ex.Error.Name, ex.Error.Value)
		}
		return strings.TrimSpace(strings.Join(ex.Logs.Stdout, ""))
	}
	// After each refusal: the sandbox runs with its variables, and
	// nothing of the snapshot stays.
	intact := func(op, vars string) {
		t.Helper()
		got, err := d.c.GetSandbox(ctx, sb.ID)
		if err != nil || got.State != api.StateRunning {
			t.Fatalf("after %s: %+v %v", op, got, err)
		}
		if out := code("print(" + vars + ")"); !strings.HasPrefix(out, "ok") {
			t.Fatalf("after %s the variables say %q", op, out)
		}
		if left := snapshotsLeft(t, d); len(left) != 0 {
			t.Fatalf("after %s the snapshot store holds %v", op, left)
		}
		if list, err := d.c.ListSnapshots(ctx, ""); err != nil || len(list.Snapshots) != 0 {
			t.Fatalf("after %s: snapshots %+v %v", op, list, err)
		}
	}
	code("x = bytearray(b'\\x01') * (100 << 20)")
	const checkX = `"ok" if len(x) == 100 << 20 and x[-1] == 1 else "x is gone"`

	// A memory checkpoint that fits when it starts and meets a full disk
	// while CRIU dumps: held once the sandbox is frozen, the disk filled
	// (room for the files' tar, not for the memory), then let go.
	holdFile := filepath.Join(hold, "checkpoint:frozen@"+sb.ID)
	if err := os.WriteFile(holdFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := d.c.Checkpoint(context.Background(), sb.ID, api.CheckpointRequest{Type: api.SnapshotMemory})
		done <- err
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(holdFile + ".reached"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkpoint never reached checkpoint:frozen; log:\n%s", d.logTail())
		}
	}
	unfill := diskspacetest.Fill(t, filepath.Join(dataDir, "filler"), 40<<20)
	os.Remove(holdFile)
	err = <-done
	unfill()
	want507(t, "memory checkpoint on a disk that fills", err, dataDir,
		"the disk filled up while writing a memory snapshot of sandbox "+sb.ID+": it needs about ")
	// CRIU's log went to the daemon's, under the sandbox's id.
	waitLog(t, d, "CRIU failed")
	logged, _ := os.ReadFile(d.log.Name())
	found := false
	for _, line := range strings.Split(string(logged), "\n") {
		if strings.Contains(line, `msg="CRIU failed"`) && strings.Contains(line, "sandbox="+sb.ID) && strings.Contains(line, "criu_log=") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the daemon's log lacks CRIU's log for %s:\n%s", sb.ID, d.logTail())
	}
	intact("a checkpoint that met a full disk", checkX)

	// More memory than the disk has room for: refused before the sandbox
	// is paused.
	code("y = bytearray(b'\\x02') * (500 << 20)")
	const checkXY = checkX + ` if len(y) == 500 << 20 and y[0] == 2 else "y is gone"`
	_, err = d.c.Checkpoint(ctx, sb.ID, api.CheckpointRequest{Type: api.SnapshotMemory})
	want507(t, "memory checkpoint", err, dataDir,
		"not enough disk space for a memory snapshot of sandbox "+sb.ID+": it needs about ", " MiB, and ", " has ")
	intact("a memory checkpoint", checkXY)
	_, err = d.c.Suspend(ctx, sb.ID)
	want507(t, "suspend", err, dataDir, "the suspend image (a memory snapshot) of sandbox "+sb.ID)
	intact("a suspend", checkXY)
	_, err = d.c.Fork(ctx, sb.ID, api.ForkRequest{Count: 1})
	want507(t, "fork", err, dataDir, "a memory snapshot of sandbox "+sb.ID)
	intact("a fork", checkXY)

	// A file in the writable layer bigger than what is left once it is
	// written: its filesystem checkpoint does not fit.
	big := min(freeBytes(t, dataDir)/2+(32<<20), 290<<20) >> 20
	if r := sh(t, d, sb.ID, fmt.Sprintf("head -c %dM /dev/urandom > /workspace/big.bin && echo written", big)); strings.TrimSpace(r.Stdout) != "written" {
		t.Fatalf("write %d MiB: %+v", big, r)
	}
	_, err = d.c.Checkpoint(ctx, sb.ID, api.CheckpointRequest{Type: api.SnapshotFilesystem})
	want507(t, "filesystem checkpoint", err, dataDir, "not enough disk space for a filesystem snapshot of sandbox "+sb.ID)
	intact("a filesystem checkpoint", checkXY)

	// Chat uploads into a full disk: one of unknown length (the Go SDK
	// streams it) fills the disk and is 507; one whose Content-Length
	// says it cannot fit is refused before it is read.
	unfill = diskspacetest.Fill(t, filepath.Join(dataDir, "filler"), 1<<20)
	csv := "n\n" + strings.Repeat("1234567\n", 512<<10) // 4 MiB
	_, err = d.c.UploadFile(ctx, "big.csv", strings.NewReader(csv), "")
	// (What it needs is a lower bound, what was written before the disk
	// filled: none at all when the daemon's own writes took the last
	// pages first.)
	want507(t, "streamed upload", err, dataDir, `the disk filled up while writing the upload "big.csv": `, " had ")
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "big.csv")
	io.WriteString(fw, csv)
	mw.Close()
	resp, err := http.Post("http://"+d.addr+"/v1/files", mw.FormDataContentType(), bytes.NewReader(body.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage || !strings.Contains(string(raw), "not enough disk space for an upload: it needs about 4.0 MiB") {
		t.Fatalf("upload of a known length: %d %s", resp.StatusCode, raw)
	}
	unfill()
	if ents, _ := os.ReadDir(filepath.Join(dataDir, "uploads")); len(ents) != 0 {
		t.Fatalf("uploads left: %v", ents)
	}

	// The daemon keeps working: a new sandbox runs a command, and a
	// snapshot that fits is taken.
	if _, err := d.c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	small := newSandbox(t, d, api.CreateSandboxRequest{DiskMB: i64(64)})
	if r := run(t, d, small.ID, "echo", "still here"); strings.TrimSpace(r.Stdout) != "still here" {
		t.Fatalf("exec after the full disks: %+v", r)
	}
	snap, err := d.c.Checkpoint(ctx, small.ID, api.CheckpointRequest{})
	if err != nil {
		t.Fatalf("a checkpoint that fits: %v", err)
	}
	if err := d.c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	d.deleteAll()
	d.stop()
	stopped = true
	// No snapshot row of any kind (suspend images included) was left.
	st, err := store.Open(ctx, "", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := st.ListSnapshots(tenant.Unscoped(ctx), "")
	st.Close()
	if err != nil || len(rows) != 0 {
		t.Fatalf("snapshot rows left: %d %v", len(rows), err)
	}

	t.Run("images", func(t *testing.T) { testImagesDiskFull(t) })
}

// testImagesDiskFull: a daemon whose images dir is a 64 MiB filesystem
// (holding the default image's layers as bind mounts of the shared ones, so
// that it starts with the default image and builds nothing) answers a
// build whose layer does not fit and an import whose layers do not fit
// with 507 naming that filesystem, leaves no layer or temporary file, and
// keeps working.
func testImagesDiskFull(t *testing.T) {
	imgDir := diskspacetest.TmpFS(t, 64<<20)
	sharedImages := os.Getenv("FORKBOX_IMAGES_DIR")
	py, err := os.ReadFile(filepath.Join(sharedImages, "python", "image.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(imgDir, "python"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(imgDir, "python", "image.json"), py, 0o644); err != nil {
		t.Fatal(err)
	}
	var img struct{ Layers []string }
	if err := json.Unmarshal(py, &img); err != nil {
		t.Fatal(err)
	}
	for _, id := range img.Layers {
		dst := filepath.Join(imgDir, ".layers", id)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(filepath.Join(sharedImages, ".layers", id), dst, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
	}
	listing := func() []string {
		var out []string
		ents, _ := os.ReadDir(filepath.Join(imgDir, ".layers"))
		for _, e := range ents {
			out = append(out, e.Name())
		}
		ents, _ = os.ReadDir(imgDir)
		for _, e := range ents {
			if e.Name() != ".layers" && e.Name() != ".lock" {
				out = append(out, e.Name())
			}
		}
		return out
	}
	d, err := startDaemon(filepath.Join(t.TempDir(), "data"), []string{"FORKBOX_IMAGES_DIR=" + imgDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })
	ctx := ctxT(t)
	// The start-up check of the default image finds every layer and
	// changes nothing; the host image is built (small).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var list api.ImageList
		getJSON(t, d, "/v1/images", &list)
		if len(list.Building) == 0 && slices.ContainsFunc(list.Images, func(i api.Image) bool { return i.Name == "python" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no python image; log:\n%s", d.logTail())
		}
	}
	before := listing()

	recipe := api.Recipe{Name: "e2e-diskfull", Base: "python", Steps: []api.RecipeStep{
		{Run: "head -c 100M /dev/urandom > /opt/big-" + recipeNonce + ".bin"},
	}}
	_, err = d.c.BuildImage(ctx, recipe, "", nil)
	want507(t, "build", err, imgDir, "step 1/1 (run): not enough disk space for the layer of build sandbox ",
		"it needs about 100.", "which holds "+filepath.Join(imgDir, ".layers")+", has ")

	noise := make([]byte, 40<<20)
	rand.Read(noise)
	layerTar := tarLayer(t, [][2]string{{"noise", string(noise)}})
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil })
	if err != nil {
		t.Fatal(err)
	}
	image, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("example.test/forkbox/diskfull:latest")
	if err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if err := tarball.Write(tag, image, &archive); err != nil {
		t.Fatal(err)
	}
	_, err = d.c.ImportImage(ctx, "e2e-diskfull-oci", &archive, nil)
	want507(t, "import", err, imgDir, `not enough disk space for the layers of image "e2e-diskfull-oci": it needs about 40.`)

	if after := listing(); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("the images dir held %v before, %v after", before, after)
	}
	for _, name := range []string{"e2e-diskfull", "e2e-diskfull-oci"} {
		if _, err := d.c.GetImage(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("image %s: %v", name, err)
		}
	}
	sb := newSandbox(t, d, api.CreateSandboxRequest{})
	if r := run(t, d, sb.ID, "echo", "still here"); strings.TrimSpace(r.Stdout) != "still here" {
		t.Fatalf("exec after the full images dir: %+v", r)
	}
}
