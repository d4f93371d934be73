//go:build linux

package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/internal/blob"
	"github.com/forkbox/forkbox/internal/blob/miniotest"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// newBucket starts a real MinIO (make setup builds it; a missing binary
// fails the test) and opens its bucket.
func newBucket(t *testing.T) *blob.S3 {
	t.Helper()
	srv := miniotest.Start(t, "")
	b, err := blob.Open(srv.URLWithPrefix("cluster"))
	if err != nil {
		t.Fatalf("open MinIO bucket (run make setup): %v", err)
	}
	return b
}

func openRemoteStore(t *testing.T, r Remote) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if r != nil {
		s.SetRemote(r)
	}
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// buildLayers commits two synthesized layers in overlayfs's format and
// registers image name on them: owners, modes (setuid), a symlink, a
// hardlink, a fifo, a user xattr, then above them a whiteout (a 0:0
// character device) and an opaque directory.
func buildLayers(t *testing.T, s *Store, name string) *Image {
	t.Helper()
	ctx := context.Background()
	bottom := &Layer{ID: ChainID("", "test bottom "+name), CreatedBy: "test bottom"}
	must(t, s.CommitLayer(ctx, bottom, func(dir string) error {
		for _, d := range []string{"etc", "bin", "opt/old"} {
			must(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
		}
		must(t, os.WriteFile(filepath.Join(dir, "etc/conf"), []byte("secret=1\n"), 0o640))
		must(t, os.Chown(filepath.Join(dir, "etc/conf"), 1000, 1001))
		must(t, os.WriteFile(filepath.Join(dir, "etc/gone"), []byte("to be whited out\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(dir, "opt/old/file"), []byte("hidden by opaque\n"), 0o644))
		tool := filepath.Join(dir, "bin/tool")
		must(t, os.WriteFile(tool, bytes.Repeat([]byte("#!tool\n"), 5000), 0o755))
		must(t, os.Chmod(tool, 0o755|os.ModeSetuid))
		must(t, unix.Lsetxattr(tool, "user.forkbox", []byte("kept"), 0))
		must(t, os.Link(tool, filepath.Join(dir, "bin/hard")))
		must(t, os.Symlink("tool", filepath.Join(dir, "bin/link")))
		must(t, unix.Mkfifo(filepath.Join(dir, "bin/fifo"), 0o600))
		// A socket, which layer tars skip (when its path fits a sockaddr).
		if p := filepath.Join(dir, "bin/sock"); len(p) < 100 {
			sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			must(t, err)
			defer unix.Close(sock)
			must(t, unix.Bind(sock, &unix.SockaddrUnix{Name: p}))
		}
		must(t, os.Chmod(filepath.Join(dir, "opt"), 0o777|os.ModeSticky))
		old := time.Date(2020, 1, 2, 3, 4, 5, 123456789, time.UTC)
		must(t, os.Chtimes(filepath.Join(dir, "etc/conf"), old, old))
		return nil
	}))
	top := &Layer{ID: ChainID(bottom.ID, "test top"), Parent: bottom.ID, CreatedBy: "test top"}
	must(t, s.CommitLayer(ctx, top, func(dir string) error {
		must(t, os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
		must(t, unix.Mknod(filepath.Join(dir, "etc/gone"), unix.S_IFCHR, 0)) // whiteout
		must(t, os.MkdirAll(filepath.Join(dir, "opt"), 0o750))
		must(t, unix.Lsetxattr(filepath.Join(dir, "opt"), opaqueXattr, []byte("y"), 0))
		must(t, os.WriteFile(filepath.Join(dir, "opt/new"), []byte("new\n"), 0o600))
		must(t, os.Chown(filepath.Join(dir, "opt/new"), 1000, 1000))
		return nil
	}))
	img := &Image{Name: name, Layers: []string{bottom.ID, top.ID}, Env: []string{"PATH=/bin"}, WorkDir: "/opt", UID: 1000, GID: 1000, Base: "oci"}
	must(t, s.Register(ctx, img, nil))
	return img
}

// describeTree describes every file under dir: type, mode, owner, size,
// content, link target, device, xattrs, modification time, and which
// names share an inode.
func describeTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64]string{}
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		desc := fmt.Sprintf("type=%o mode=%o owner=%d:%d", st.Mode&unix.S_IFMT, st.Mode&0o7777, st.Uid, st.Gid)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			must(t, err)
			desc += fmt.Sprintf(" size=%d sha=%x", st.Size, sha256.Sum256(data))
			if first, ok := inodes[st.Ino]; ok {
				desc += " hardlink-of=" + first
			} else {
				inodes[st.Ino] = rel
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			must(t, err)
			desc += " -> " + target
		case unix.S_IFCHR, unix.S_IFBLK:
			desc += fmt.Sprintf(" dev=%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Mode&unix.S_IFMT != unix.S_IFLNK {
			desc += fmt.Sprintf(" mtime=%d", st.Mtim.Nano())
		}
		names, err := listXattrs(p)
		must(t, err)
		sort.Strings(names)
		for _, n := range names {
			v, err := getXattr(p, n)
			must(t, err)
			desc += fmt.Sprintf(" xattr:%s=%q", n, v)
		}
		out[rel] = desc
		return nil
	}))
	return out
}

func sameTrees(t *testing.T, a, b string) {
	t.Helper()
	da, db := describeTree(t, a), describeTree(t, b)
	for k, v := range da {
		if db[k] != v && !strings.HasSuffix(k, "sock") {
			t.Errorf("%s:\n  built   %s\n  fetched %s", k, v, db[k])
		}
	}
	for k := range db {
		if _, ok := da[k]; !ok && !strings.HasSuffix(k, "sock") {
			t.Errorf("%s: fetched but not built: %s", k, db[k])
		}
	}
}

// countingRemote counts the downloads of layer tars.
type countingRemote struct {
	Remote
	tarGets atomic.Int64
	failPut atomic.Bool
}

func (c *countingRemote) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if strings.HasSuffix(key, ".tar") {
		c.tarGets.Add(1)
	}
	return c.Remote.Get(ctx, key)
}

func (c *countingRemote) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if c.failPut.Load() {
		return errors.New("object store hiccup")
	}
	return c.Remote.Put(ctx, key, r, size)
}

func TestRemoteImageRoundTrip(t *testing.T) {
	ctx := context.Background()
	b := newBucket(t)
	start := time.Now()
	a := openRemoteStore(t, b)
	built := buildLayers(t, a, "acme+tools")
	t.Logf("build and upload: %v", time.Since(start))
	for _, id := range built.Layers {
		for _, k := range []string{tarKeyOf(t, b, id), remoteLayerMetaKey(id)} {
			if _, _, err := b.Stat(ctx, k); err != nil {
				t.Fatalf("%s not uploaded: %v", k, err)
			}
		}
	}
	if _, _, err := b.Stat(ctx, "images/acme+tools/image.json"); err != nil {
		t.Fatalf("image record not uploaded: %v", err)
	}
	if _, err := os.Stat(filepath.Join(a.Dir(), pendingDir, "acme+tools")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("pending mark left after a good upload: %v", err)
	}

	// Another node: same bucket, its own directory.
	start = time.Now()
	other := openRemoteStore(t, b)
	got, err := other.Get(ctx, "acme+tools")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fetch: %v", time.Since(start))
	if got.ID != built.ID || got.WorkDir != "/opt" || got.UID != 1000 || len(got.LowerDirs) != 2 || got.SizeBytes != built.SizeBytes {
		t.Fatalf("fetched %+v, built %+v", got, built)
	}
	for i, id := range built.Layers {
		sameTrees(t, a.LayerDir(id), other.LayerDir(id))
		if got.LowerDirs[len(got.LowerDirs)-1-i] != other.LayerDir(id) {
			t.Errorf("lower dirs %v", got.LowerDirs)
		}
		l, err := other.GetLayer(id)
		if err != nil || l.CreatedBy == "" || (i == 1 && l.Parent != built.Layers[0]) {
			t.Errorf("layer record %+v %v", l, err)
		}
	}
	// Spot checks of what overlayfs needs, beyond "equal to the source".
	top := other.LayerDir(built.Layers[1])
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(top, "etc/gone"), &st))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("whiteout: mode %o rdev %d", st.Mode, st.Rdev)
	}
	if !isOpaqueDir(filepath.Join(top, "opt")) {
		t.Error("opaque xattr lost")
	}
	bottom := other.LayerDir(built.Layers[0])
	if _, err := os.Lstat(filepath.Join(bottom, "bin/sock")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket carried: %v", err)
	}
	var t1, t2 unix.Stat_t
	must(t, unix.Lstat(filepath.Join(bottom, "bin/tool"), &t1))
	must(t, unix.Lstat(filepath.Join(bottom, "bin/hard"), &t2))
	if t1.Ino != t2.Ino || t1.Mode&0o7777 != 0o4755 {
		t.Errorf("hardlink or setuid lost: %d %d %o", t1.Ino, t2.Ino, t1.Mode)
	}
	if imgs, err := other.List(ctx); err != nil || len(imgs) != 1 {
		t.Errorf("list after fetch: %v %v", imgs, err)
	}

	// A name the bucket lacks is not found, as locally.
	if _, err := other.Get(ctx, "nothing"); !errors.Is(err, errdefs.ErrNotFound) || err.Error() != `image "nothing" not found` {
		t.Errorf("Get of a missing image: %v", err)
	}

	// Removal through any node takes the record out of the bucket (the
	// layers stay); no node fetches it again.
	must(t, other.Remove(ctx, "acme+tools", nil))
	if _, _, err := b.Stat(ctx, "images/acme+tools/image.json"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("image record after remove: %v", err)
	}
	if _, _, err := b.Stat(ctx, tarKeyOf(t, b, built.Layers[0])); err != nil {
		t.Errorf("shared layer removed: %v", err)
	}
	if _, err := openRemoteStore(t, b).Get(ctx, "acme+tools"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after remove on a third node: %v", err)
	}
	if _, err := a.Get(ctx, "acme+tools"); err != nil {
		t.Errorf("the building node's copy: %v", err) // a local cache; see remote.go
	}
}

func TestRemoteRemoveOfAnImageOnlyInTheBucket(t *testing.T) {
	ctx := context.Background()
	b := newBucket(t)
	buildLayers(t, openRemoteStore(t, b), "tools")
	other := openRemoteStore(t, b)
	var seen string
	must(t, other.Remove(ctx, "tools", func(img *Image) error { seen = img.Name; return nil }))
	if seen != "tools" {
		t.Errorf("inUse saw %q", seen)
	}
	if _, err := other.Get(ctx, "tools"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after remove: %v", err)
	}
	if err := other.Remove(ctx, "tools", nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second remove: %v", err)
	}
}

func TestRemoteCorruptLayerIsRefused(t *testing.T) {
	ctx := context.Background()
	b := newBucket(t)
	built := buildLayers(t, openRemoteStore(t, b), "tools")
	// Flip one byte of the bottom layer's tar (its size stays).
	key := tarKeyOf(t, b, built.Layers[0])
	rc, err := b.Get(ctx, key)
	must(t, err)
	data, err := io.ReadAll(rc)
	rc.Close()
	must(t, err)
	i := bytes.Index(data, []byte("#!tool"))
	if i < 0 {
		t.Fatal("tool's content not in the tar")
	}
	data[i] = 'X'
	must(t, b.Put(ctx, key, bytes.NewReader(data), int64(len(data))))

	other := openRemoteStore(t, b)
	_, err = other.Get(ctx, "tools")
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Get of an image with a corrupt layer: %v", err)
	}
	t.Logf("refused: %v", err)
	if other.HasLayer(built.Layers[0]) {
		t.Error("corrupt layer committed")
	}
	entries, _ := os.ReadDir(filepath.Join(other.Dir(), layersDir))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) || e.Name() == built.Layers[0] {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(other.Dir(), "tools")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("image dir left behind: %v", err)
	}
	// A truncated tar is refused the same way.
	must(t, b.Put(ctx, key, bytes.NewReader(data[:len(data)/2]), int64(len(data)/2)))
	if _, err := other.Get(ctx, "tools"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Get of an image with a truncated layer: %v", err)
	}
}

func TestRemoteConcurrentFetches(t *testing.T) {
	ctx := context.Background()
	b := newBucket(t)
	built := buildLayers(t, openRemoteStore(t, b), "tools")
	cr := &countingRemote{Remote: b}
	other := openRemoteStore(t, cr)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			img, err := other.Get(ctx, "tools")
			if err == nil && img.ID != built.ID {
				err = fmt.Errorf("got id %s", img.ID)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := cr.tarGets.Load(); got != int64(len(built.Layers)) {
		t.Errorf("%d layer downloads for %d layers", got, len(built.Layers))
	}
}

func TestRemoteUploadFailureKeepsTheImageAndRetries(t *testing.T) {
	ctx := context.Background()
	b := newBucket(t)
	cr := &countingRemote{Remote: b}
	cr.failPut.Store(true)
	a := openRemoteStore(t, cr)
	built := buildLayers(t, a, "tools") // Register must not fail
	if _, err := a.Get(ctx, "tools"); err != nil {
		t.Fatalf("local image after a failed upload: %v", err)
	}
	if _, err := os.Stat(filepath.Join(a.Dir(), pendingDir, "tools")); err != nil {
		t.Fatalf("no pending mark: %v", err)
	}
	if _, err := openRemoteStore(t, b).Get(ctx, "tools"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get on another node before the retry: %v", err)
	}
	cr.failPut.Store(false)
	must(t, a.RetryPending(ctx))
	if _, err := os.Stat(filepath.Join(a.Dir(), pendingDir, "tools")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("pending mark after the retry: %v", err)
	}
	img, err := openRemoteStore(t, b).Get(ctx, "tools")
	if err != nil || img.ID != built.ID {
		t.Fatalf("Get on another node after the retry: %v %v", img, err)
	}
}

func TestRemoteHostImageStaysLocal(t *testing.T) {
	ctx := context.Background()
	b := newBucket(t)
	a := openRemoteStore(t, b)
	l := &Layer{ID: ChainID("", "host test"), CreatedBy: "test"}
	must(t, a.CommitLayer(ctx, l, func(dir string) error { return nil }))
	// The host image, and an image on top of a host-derived rootfs.
	must(t, a.Register(ctx, &Image{Name: HostImage, Layers: []string{l.ID}}, nil))
	must(t, a.Register(ctx, &Image{Name: "onhost", RootFS: t.TempDir(), Binds: []Bind{{Source: "/usr", Target: "/usr", ReadOnly: true}}, Layers: []string{l.ID}}, nil))
	for _, name := range []string{HostImage, "onhost"} {
		if _, _, err := b.Stat(ctx, remoteImageKey(name)); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s uploaded: %v", name, err)
		}
	}
	// Nor is "host" ever fetched, even if the bucket had one.
	must(t, b.Put(ctx, remoteImageKey(HostImage), strings.NewReader("{}"), 2))
	if _, err := openRemoteStore(t, b).Get(ctx, HostImage); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(host) on another node: %v", err)
	}
}

func TestLayerTarKeepsTrustedXattrsButExtractTarDoesNot(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	must(t, os.Mkdir(filepath.Join(src, "d"), 0o755))
	must(t, unix.Lsetxattr(filepath.Join(src, "d"), opaqueXattr, []byte("y"), 0))
	var buf bytes.Buffer
	must(t, writeLayerTar(ctx, src, &buf))
	layer := t.TempDir()
	must(t, extractLayerTar(ctx, bytes.NewReader(buf.Bytes()), layer))
	if !isOpaqueDir(filepath.Join(layer, "d")) {
		t.Error("layer tar lost trusted.overlay.opaque")
	}
	user := t.TempDir()
	must(t, ExtractTar(ctx, bytes.NewReader(buf.Bytes()), user, ExtractOptions{KeepOwners: true, Whiteouts: true}))
	if isOpaqueDir(filepath.Join(user, "d")) {
		t.Error("ExtractTar of a user archive set trusted.overlay.opaque")
	}
}

// tarKeyOf is where layer id's tar is, as its record in the bucket says.
func tarKeyOf(t *testing.T, r Remote, id string) string {
	t.Helper()
	rl, err := getRemoteLayer(context.Background(), r, id)
	must(t, err)
	return remoteLayerTarKey(id, rl.SHA256)
}

// Two nodes that upload one layer at once (each built it, with its own
// timestamps, so their tars differ) leave the record of one and the image
// record of the other: every record still names a tar that matches it.
func TestRemoteLayerUploadedByTwoNodesAtOnce(t *testing.T) {
	ctx := context.Background()
	b := newBucket(t)
	built := buildLayers(t, openRemoteStore(t, b), "tools")
	id := built.Layers[0]
	// The other node's upload lands after: its tar under its own sum, its
	// record over the first one's.
	rl, err := getRemoteLayer(ctx, b, id)
	must(t, err)
	other := []byte("the other node's tar of the same layer")
	sum := sha256.Sum256(other)
	rl.SHA256, rl.TarSize = hex.EncodeToString(sum[:]), int64(len(other))
	must(t, b.Put(ctx, remoteLayerTarKey(id, rl.SHA256), bytes.NewReader(other), rl.TarSize))
	data, err := json.Marshal(rl)
	must(t, err)
	must(t, b.Put(ctx, remoteLayerMetaKey(id), bytes.NewReader(data), int64(len(data))))
	// The image record names the first upload's tar, which is intact.
	if _, err := openRemoteStore(t, b).Get(ctx, "tools"); err != nil {
		t.Fatalf("a node fetching the image after the race: %v", err)
	}
}
