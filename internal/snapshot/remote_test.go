package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/blob"
	"github.com/forkbox/forkbox/internal/blob/miniotest"
	"github.com/forkbox/forkbox/internal/errdefs"
)

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func randBytes(seed byte, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

// remoteStore is a store in a temp dir backed by a fresh MinIO bucket.
func remoteStore(t *testing.T, cacheBytes int64) (*Store, *blob.S3) {
	t.Helper()
	srv := miniotest.Start(t, "")
	r, err := blob.Open(srv.URLWithPrefix("forkbox"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.SetRemote(r, cacheBytes)
	return s, r
}

// commit writes files (path → content) as snapshot id, with a criu dir
// searchable by others as the daemon makes it.
func commit(t *testing.T, s *Store, id string, files map[string][]byte) (int64, string) {
	t.Helper()
	p, err := s.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	for rel, b := range files {
		f := filepath.Join(p.Dir(), filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(f), 0o755)
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(p.Dir(), "criu")); err == nil {
		os.Chmod(filepath.Join(p.Dir(), "criu"), 0o755)
	}
	size, sum, err := p.Commit()
	if err != nil {
		p.Abort()
		t.Fatal(err)
	}
	return size, sum
}

func keys(t *testing.T, r *blob.S3, prefix string) map[string]blob.Object {
	t.Helper()
	objs, err := r.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]blob.Object{}
	for _, o := range objs {
		m[o.Key] = o
	}
	return m
}

func getObj(t *testing.T, r *blob.S3, key string) []byte {
	t.Helper()
	rc, err := r.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func localEntries(t *testing.T, s *Store) []string {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

func TestRemoteCommitFetchVerify(t *testing.T) {
	s, r := remoteStore(t, 0)
	files := map[string][]byte{"fs.tar": randBytes(1, 300<<10), "criu/pages-1.img": randBytes(2, 1<<20), "criu/core-1.img": []byte("core")}
	_, sum := commit(t, s, "snap_a", files)

	// Every file is in the bucket by its hash, and the manifest is the
	// one whose checksum was returned.
	blobs := keys(t, r, "blobs/")
	for rel, b := range files {
		if o, ok := blobs["blobs/sha256/"+sha(b)]; !ok || o.Size != int64(len(b)) {
			t.Fatalf("%s: blob missing or wrong size: %+v", rel, blobs)
		}
	}
	if len(blobs) != len(files) {
		t.Fatalf("blobs: %v", blobs)
	}
	if got := sha(getObj(t, r, "snapshots/snap_a/manifest.json")); got != sum {
		t.Fatalf("remote manifest checksum %s, committed %s", got, sum)
	}

	// Lost on disk (another node, or evicted): Verify fetches it, several
	// at once without colliding.
	if err := os.RemoveAll(s.Path("snap_a")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Verify("snap_a", sum)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for rel, b := range files {
		got, err := os.ReadFile(filepath.Join(s.Path("snap_a"), filepath.FromSlash(rel)))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("%s after fetch: %v", rel, err)
		}
	}
	if st, err := os.Stat(filepath.Join(s.Path("snap_a"), "criu")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("criu dir after fetch: %v %v", st.Mode(), err)
	}
	if names := localEntries(t, s); len(names) != 1 || names[0] != "snap_a" {
		t.Fatalf("local entries after fetch: %v", names)
	}
	// The fetched copy is a committed snapshot like any: it verifies on
	// disk, and a corruption of it is caught as before.
	if err := s.Verify("snap_a", sum); err != nil {
		t.Fatal(err)
	}
	// Clone fetches a missing source too, and uploads only the clone's
	// manifest (its files are the source's blobs).
	os.RemoveAll(s.Path("snap_a"))
	_, csum, err := s.Clone("snap_a", sum, "snap_c", func(rel string) bool { return rel == "fs.tar" })
	if err != nil {
		t.Fatal(err)
	}
	if n := len(keys(t, r, "blobs/")); n != len(files) {
		t.Fatalf("clone uploaded blobs: %d", n)
	}
	os.RemoveAll(s.Path("snap_c"))
	if err := s.Verify("snap_c", csum); err != nil {
		t.Fatal(err)
	}
	// A wrong recorded checksum is refused before any file is fetched.
	os.RemoveAll(s.Path("snap_a"))
	if err := s.Verify("snap_a", sha([]byte("other"))); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("wrong checksum: %v", err)
	}
	if _, err := os.Stat(s.Path("snap_a")); !os.IsNotExist(err) {
		t.Fatalf("refused snapshot left on disk: %v", err)
	}
	// Unknown everywhere.
	if err := s.Verify("snap_nope", sum); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("missing snapshot: %v", err)
	}

	// Delete: the local copy and the manifest go, the blobs stay for GC.
	if err := s.Verify("snap_a", sum); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("snap_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path("snap_a")); !os.IsNotExist(err) {
		t.Fatalf("deleted snapshot on disk: %v", err)
	}
	if _, ok := keys(t, r, "snapshots/")["snapshots/snap_a/manifest.json"]; ok {
		t.Fatal("deleted snapshot's manifest still in the bucket")
	}
	if n := len(keys(t, r, "blobs/")); n != len(files) {
		t.Fatalf("delete removed blobs: %d left", n)
	}
}

func TestRemoteCorruptBlobRefused(t *testing.T) {
	s, r := remoteStore(t, 0)
	pages := randBytes(3, 64<<10)
	_, sum := commit(t, s, "snap_a", map[string][]byte{"fs.tar": []byte("fs"), "criu/pages-1.img": pages})
	os.RemoveAll(s.Path("snap_a"))
	// Flip one byte of the memory image in the bucket.
	bad := bytes.Clone(pages)
	bad[100] ^= 0xff
	if err := r.Put(context.Background(), "blobs/sha256/"+sha(pages), bytes.NewReader(bad), int64(len(bad))); err != nil {
		t.Fatal(err)
	}
	err := s.Verify("snap_a", sum)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "snap_a") || !strings.Contains(err.Error(), "pages-1.img") {
		t.Fatalf("corrupt remote blob: %v", err)
	}
	if names := localEntries(t, s); len(names) != 0 {
		t.Fatalf("a refused fetch left %v", names)
	}
	// A missing blob is refused the same way.
	r.Delete(context.Background(), "blobs/sha256/"+sha(pages))
	if err := s.Verify("snap_a", sum); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "pages-1.img") {
		t.Fatalf("missing remote blob: %v", err)
	}
	if names := localEntries(t, s); len(names) != 0 {
		t.Fatalf("a refused fetch left %v", names)
	}
}

func TestRemoteSharedBlobsUploadedOnce(t *testing.T) {
	s, r := remoteStore(t, 0)
	fsTar := randBytes(4, 200<<10)
	commit(t, s, "snap_a", map[string][]byte{"fs.tar": fsTar, "criu/pages-1.img": randBytes(5, 100<<10)})
	before := keys(t, r, "blobs/")
	time.Sleep(1100 * time.Millisecond) // object times are in seconds
	// A later snapshot of the lineage: the same filesystem, new pages,
	// and a file that repeats another's content.
	newPages := randBytes(6, 100<<10)
	commit(t, s, "snap_b", map[string][]byte{"fs.tar": fsTar, "criu/pages-1.img": newPages, "criu/pages-2.img": newPages})
	after := keys(t, r, "blobs/")
	if len(after) != len(before)+1 {
		t.Fatalf("blobs before %d, after %d: want one more", len(before), len(after))
	}
	if _, ok := after["blobs/sha256/"+sha(newPages)]; !ok {
		t.Fatal("new pages not uploaded")
	}
	k := "blobs/sha256/" + sha(fsTar)
	if !after[k].ModTime.Equal(before[k].ModTime) {
		t.Fatalf("shared blob uploaded again: %v then %v", before[k].ModTime, after[k].ModTime)
	}
}

func TestRemoteGC(t *testing.T) {
	s, r := remoteStore(t, 0)
	ctx := context.Background()
	shared, onlyA, onlyB := randBytes(7, 1000), randBytes(8, 1000), randBytes(9, 1000)
	commit(t, s, "snap_a", map[string][]byte{"fs.tar": shared, "criu/pages-1.img": onlyA})
	commit(t, s, "snap_b", map[string][]byte{"fs.tar": shared, "criu/pages-1.img": onlyB})
	// A blob no manifest names (an upload that died, say).
	orphan := []byte("orphan")
	r.Put(ctx, "blobs/sha256/"+sha(orphan), bytes.NewReader(orphan), int64(len(orphan)))

	// Everything is younger than an hour: nothing goes.
	if n, err := s.GC(ctx, func(string) bool { return false }, time.Hour); err != nil || n != 0 {
		t.Fatalf("gc with grace: removed %d, %v", n, err)
	}
	// The records know snap_a only: snap_b's manifest goes, with its own
	// blob and the orphan; the shared one and snap_a's stay.
	n, err := s.GC(ctx, func(id string) bool { return id == "snap_a" }, 0)
	if err != nil || n != 3 {
		t.Fatalf("gc: removed %d, %v", n, err)
	}
	var got []string
	for k := range keys(t, r, "") {
		got = append(got, k)
	}
	sort.Strings(got)
	want := []string{"blobs/sha256/" + sha(shared), "blobs/sha256/" + sha(onlyA), "snapshots/snap_a/manifest.json"}
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after gc: %v, want %v", got, want)
	}
	// A GC from another node's store (no cached manifests) agrees.
	other, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other.SetRemote(r, 0)
	if n, err := other.GC(ctx, func(id string) bool { return id == "snap_a" }, 0); err != nil || n != 0 {
		t.Fatalf("second gc: removed %d, %v", n, err)
	}
	// snap_a still restores on that node.
	if err := other.Verify("snap_a", ""); err != nil {
		t.Fatal(err)
	}
}

func TestRemoteCacheEviction(t *testing.T) {
	const mb = 1 << 20
	s, _ := remoteStore(t, 2*mb+mb/2)
	sums := map[string]string{}
	old := func(id string) {
		s.r.mu.Lock()
		s.r.lastUse[id] = time.Now().Add(-time.Hour)
		s.r.mu.Unlock()
	}
	local := func() []string {
		ids, _ := s.IDs()
		sort.Strings(ids)
		return ids
	}
	for i, id := range []string{"snap_1", "snap_2", "snap_3"} {
		_, sums[id] = commit(t, s, id, map[string][]byte{"fs.tar": randBytes(byte(10+i), mb)})
	}
	// Three MiB over a budget of 2.5, but all just used: all stay.
	if ids := local(); len(ids) != 3 {
		t.Fatalf("recent snapshots evicted: %v", ids)
	}
	// snap_1 and snap_3 long unused, snap_2 used now (a restore's Path):
	// the next commit evicts the least recently used, snap_1, then snap_3
	// if still over budget, never snap_2.
	old("snap_1")
	old("snap_3")
	s.r.mu.Lock()
	s.r.lastUse["snap_3"] = s.r.lastUse["snap_3"].Add(time.Minute) // younger than snap_1
	s.r.mu.Unlock()
	s.Path("snap_2")
	_, sums["snap_4"] = commit(t, s, "snap_4", map[string][]byte{"fs.tar": randBytes(20, mb)})
	if ids := local(); strings.Join(ids, ",") != "snap_2,snap_4" {
		t.Fatalf("after eviction: %v, want snap_2,snap_4", ids)
	}
	if n := dirSizes(s); n > 2*mb+mb/2 {
		t.Fatalf("cache %d bytes over budget", n)
	}
	// An evicted snapshot comes back on Verify (and the cache stays in
	// budget by evicting what is old).
	old("snap_4")
	if err := s.Verify("snap_1", sums["snap_1"]); err != nil {
		t.Fatal(err)
	}
	if ids := local(); strings.Join(ids, ",") != "snap_1,snap_2" {
		t.Fatalf("after fetch: %v, want snap_1,snap_2", ids)
	}
	// A snapshot only on disk (no manifest in the store) is never evicted.
	if err := s.remote().Delete(context.Background(), manifestKey("snap_2")); err != nil {
		t.Fatal(err)
	}
	s.r.mu.Lock()
	delete(s.r.remoteIDs, "snap_2")
	s.r.mu.Unlock()
	old("snap_1")
	s.r.mu.Lock()
	s.r.lastUse["snap_2"] = time.Now().Add(-2 * time.Hour) // the least recently used
	s.r.mu.Unlock()
	commit(t, s, "snap_5", map[string][]byte{"fs.tar": randBytes(21, mb)})
	if ids := local(); strings.Join(ids, ",") != "snap_2,snap_5" {
		t.Fatalf("after eviction: %v, want snap_2,snap_5", ids)
	}
}

func dirSizes(s *Store) int64 {
	ids, _ := s.IDs()
	var n int64
	for _, id := range ids {
		n += dirSize(s.path(id))
	}
	return n
}

// The crash: a daemon killed mid-upload leaves no manifest, and GC removes
// the blobs it had sent.
func TestRemoteCrashMidUpload(t *testing.T) {
	if os.Getenv("FORKBOX_SNAPSHOT_CRASH_CHILD") != "" {
		crashChild(t)
		return
	}
	srv := miniotest.Start(t, "")
	url := srv.URLWithPrefix("forkbox")
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRemoteCrashMidUpload$", "-test.v")
	cmd.Env = append(os.Environ(), "FORKBOX_SNAPSHOT_CRASH_CHILD=1", "FORKBOX_TEST_S3_URL="+url,
		"FORKBOX_TEST_SNAPSHOT_DIR="+dir, "FORKBOX_FAULT="+FaultUploading)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die at the fault point: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "committed") {
		t.Fatalf("child committed:\n%s", out)
	}
	r, err := blob.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	if m := keys(t, r, "snapshots/"); len(m) != 0 {
		t.Fatalf("manifest of a snapshot killed mid-upload: %v", m)
	}
	if m := keys(t, r, "blobs/"); len(m) == 0 {
		t.Fatal("the child died before uploading any blob: the test proves nothing")
	}
	// The restarted node: nothing committed, and GC takes every blob.
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.SetRemote(r, 0)
	if names := localEntries(t, s); len(names) != 0 {
		t.Fatalf("local entries after restart: %v", names)
	}
	if err := s.Verify("snap_crash", ""); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("verify of the crashed snapshot: %v", err)
	}
	if _, err := s.GC(context.Background(), func(string) bool { return false }, 0); err != nil {
		t.Fatal(err)
	}
	if m := keys(t, r, ""); len(m) != 0 {
		t.Fatalf("left in the bucket after gc: %v", m)
	}
}

func crashChild(t *testing.T) {
	r, err := blob.Open(os.Getenv("FORKBOX_TEST_S3_URL"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(os.Getenv("FORKBOX_TEST_SNAPSHOT_DIR"))
	if err != nil {
		t.Fatal(err)
	}
	s.SetRemote(r, 0)
	commit(t, s, "snap_crash", map[string][]byte{"fs.tar": randBytes(30, 1000), "criu/pages-1.img": randBytes(31, 1000), "criu/core-1.img": randBytes(32, 1000)})
	t.Log("committed")
}
