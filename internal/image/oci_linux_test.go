package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// Layers of the test image.
//
// base has users, files to delete, a directory to make opaque, a setuid
// binary, a file with an owner and an xattr, and a device node. top deletes
// gone.txt with a whiteout, makes opq/ opaque, and adds a symlink and a
// hardlink.
func baseLayer(t testing.TB) []byte {
	return mkTar(t,
		tarEntry{name: "etc/", typ: tar.TypeDir},
		tarEntry{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/sh\napp:x:1001:1002:App:/home/app:/bin/sh\n"},
		tarEntry{name: "etc/group", body: "root:x:0:\napp:x:1002:\nstaff:x:50:app\n"},
		tarEntry{name: "keep/", typ: tar.TypeDir},
		tarEntry{name: "keep/a.txt", body: "kept\n"},
		tarEntry{name: "gone.txt", body: "deleted by the top layer\n"},
		tarEntry{name: "opq/", typ: tar.TypeDir},
		tarEntry{name: "opq/old.txt", body: "hidden by the opaque dir\n"},
		tarEntry{name: "bin/", typ: tar.TypeDir},
		tarEntry{name: "bin/tool", body: "#!/bin/sh\n", mode: 0o4755},
		tarEntry{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		tarEntry{name: "home/app/", typ: tar.TypeDir, mode: 0o750, uid: 1001, gid: 1002},
		tarEntry{name: "home/app/data", body: "app data\n", mode: 0o600, uid: 1001, gid: 1002,
			xattrs: map[string]string{"user.test": "hello", "trusted.overlay.opaque": "y", "trusted.evil": "x"}},
		tarEntry{name: "dev/", typ: tar.TypeDir},
		tarEntry{name: "dev/null", typ: tar.TypeChar, major: 1, minor: 3, mode: 0o666},
		tarEntry{name: "run/fifo", typ: tar.TypeFifo, mode: 0o600},
	)
}

func topLayer(t testing.TB) []byte {
	return mkTar(t,
		tarEntry{name: ".wh.gone.txt"},
		tarEntry{name: "opq/", typ: tar.TypeDir},
		tarEntry{name: "opq/.wh..wh..opq"},
		tarEntry{name: "opq/new.txt", body: "new\n"},
		tarEntry{name: "keep/b.txt", body: "second layer\n"},
		tarEntry{name: "hard", typ: tar.TypeLink, link: "keep/b.txt"},
		tarEntry{name: "link", typ: tar.TypeSymlink, link: "keep/a.txt"},
		tarEntry{name: ".wh..wh.plnk/ignored", body: "aufs bookkeeping"},
	)
}

// v1Layer makes a gzipped go-containerregistry layer of an uncompressed tar.
func v1Layer(t testing.TB, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage makes a v1 image of the layers with cfg.
func testImage(t testing.TB, cfg v1.Config, layers ...[]byte) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, b := range layers {
		ls = append(ls, v1Layer(t, b))
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// dockerSave writes img as `docker save` does.
func dockerSave(t testing.TB, img v1.Image) []byte {
	t.Helper()
	tag, err := name.NewTag("forkbox.test/img:latest")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ociLayout writes imgs as an OCI image layout directory.
func ociLayout(t testing.TB, imgs map[v1.Image][]layout.Option) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for img, opts := range imgs {
		if err := p.AppendImage(img, opts...); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// docker25Layout adds to the OCI layout dir of img the manifest.json that
// Docker 25 and later write beside it, naming the same blobs.
func docker25Layout(t testing.TB, dir string, img v1.Image) string {
	t.Helper()
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, "blobs/sha256/"+d.Hex)
	}
	m, err := json.Marshal([]map[string]any{{"Config": "blobs/sha256/" + cfg.Hex, "RepoTags": []string{"test:latest"}, "Layers": paths}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), m, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tarDir packs dir as skopeo's oci-archive does.
func tarDir(t testing.TB, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// logger collects Import's progress lines.
type logger struct {
	mu    sync.Mutex
	lines []string
}

func (l *logger) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logger) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *logger) count(sub string) int {
	return strings.Count(l.text(), sub)
}

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	s.gcGrace = 0 // these tests check what gc removes at once
	return s
}

func lstat(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestImportFormats(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	img := testImage(t, v1.Config{Env: []string{"FOO=bar"}, WorkingDir: "work", User: "app"}, baseLayer(t), topLayer(t))
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	ociDir := ociLayout(t, map[v1.Image][]layout.Option{img: nil})
	ociTar := tarDir(t, ociDir)
	docker25 := tarDir(t, docker25Layout(t, ociDir, img))

	for _, tc := range []struct {
		format  string
		archive []byte
		recipe  string
	}{
		{"docker", dockerSave(t, img), "oci/" + cfgName.String()},
		{"oci", ociTar, "oci/" + digest.String()},
		{"oci-gzip", gzipBytes(t, ociTar), "oci/" + digest.String()},
		{"docker25", docker25, "oci/" + cfgName.String()},
	} {
		t.Run(tc.format, func(t *testing.T) {
			s := openStore(t)
			var log logger
			got, err := s.Import(ctx, "imported", bytes.NewReader(tc.archive), nil, log.logf)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("log:\n%s", log.text())
			if got.Name != "imported" || len(got.Layers) != 2 || got.Base != "oci" || got.Recipe != tc.recipe ||
				got.WorkDir != "/work" || got.UID != 1001 || got.GID != 1002 || got.User != "app" ||
				!contains(got.Env, "FOO=bar") || !contains(got.Env, ociDefaultPath) || got.SizeBytes <= 0 {
				t.Errorf("image = %+v", got)
			}
			if log.count("layer 1/2 sha256:") != 1 || log.count("layer 2/2 sha256:") != 1 || log.count("(cached)") != 0 {
				t.Errorf("log = %q", log.text())
			}
			stored, err := s.Get(ctx, "imported")
			if err != nil || stored.ID != got.ID || len(stored.LowerDirs) != 2 {
				t.Fatalf("Get = %+v, %v", stored, err)
			}
			checkLayers(t, s, got)
			checkOverlay(t, stored)

			// Again: every layer is reused and the image is unchanged.
			var log2 logger
			again, err := s.Import(ctx, "imported", bytes.NewReader(tc.archive), nil, log2.logf)
			if err != nil {
				t.Fatal(err)
			}
			if again.ID != got.ID || log2.count("(cached)") != 2 {
				t.Errorf("re-import: id %s (was %s), log %q", again.ID, got.ID, log2.text())
			}
		})
	}
}

// checkLayers looks at the layer trees of the test image.
func checkLayers(t *testing.T, s *Store, img *Image) {
	t.Helper()
	base, top := s.LayerDir(img.Layers[0]), s.LayerDir(img.Layers[1])

	// The whiteout is a 0:0 character device.
	st := lstat(t, filepath.Join(top, "gone.txt"))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("gone.txt in the top layer: mode %o rdev %d, want a 0:0 char device", st.Mode, st.Rdev)
	}
	if _, err := os.Lstat(filepath.Join(top, ".wh.gone.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf(".wh.gone.txt left in the layer: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(top, ".wh..wh.plnk")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("aufs bookkeeping extracted: %v", err)
	}
	if !isOpaqueDir(filepath.Join(top, "opq")) {
		t.Error("opq/ in the top layer is not opaque")
	}
	if _, err := os.Lstat(filepath.Join(top, "opq", ".wh..wh..opq")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("opaque marker left as a file: %v", err)
	}
	if isOpaqueDir(filepath.Join(base, "home", "app")) {
		t.Error("an archive's trusted.overlay.opaque xattr was kept")
	}
	if target, err := os.Readlink(filepath.Join(top, "link")); err != nil || target != "keep/a.txt" {
		t.Errorf("link -> %q, %v", target, err)
	}
	hard, b := lstat(t, filepath.Join(top, "hard")), lstat(t, filepath.Join(top, "keep", "b.txt"))
	if hard.Ino != b.Ino || hard.Nlink != 2 {
		t.Errorf("hard: ino %d nlink %d, keep/b.txt ino %d", hard.Ino, hard.Nlink, b.Ino)
	}

	// Modes, owners, times, xattrs.
	for p, want := range map[string]struct {
		mode     uint32
		uid, gid uint32
	}{
		"bin/tool":      {unix.S_IFREG | 0o4755, 0, 0},
		"tmp":           {unix.S_IFDIR | 0o1777, 0, 0},
		"home/app":      {unix.S_IFDIR | 0o750, 1001, 1002},
		"home/app/data": {unix.S_IFREG | 0o600, 1001, 1002},
		"home":          {unix.S_IFDIR | 0o755, 0, 0}, // missing from the archive
		"run/fifo":      {unix.S_IFIFO | 0o600, 0, 0},
		"dev/null":      {unix.S_IFCHR | 0o666, 0, 0},
	} {
		st := lstat(t, filepath.Join(base, p))
		if st.Mode != want.mode || st.Uid != want.uid || st.Gid != want.gid {
			t.Errorf("%s: mode %o %d:%d, want %o %d:%d", p, st.Mode, st.Uid, st.Gid, want.mode, want.uid, want.gid)
		}
	}
	if st := lstat(t, filepath.Join(base, "dev/null")); st.Rdev != unix.Mkdev(1, 3) {
		t.Errorf("dev/null rdev %d", st.Rdev)
	}
	for _, p := range []string{"bin/tool", "home/app", "keep", "etc/passwd"} {
		if st := lstat(t, filepath.Join(base, p)); st.Mtim.Sec != testMtime.Unix() {
			t.Errorf("%s: mtime %d, want %d", p, st.Mtim.Sec, testMtime.Unix())
		}
	}
	if st := lstat(t, filepath.Join(top, "link")); st.Mtim.Sec != testMtime.Unix() {
		t.Errorf("symlink mtime %d", st.Mtim.Sec)
	}
	buf := make([]byte, 64)
	if n, err := unix.Lgetxattr(filepath.Join(base, "home/app/data"), "user.test", buf); err != nil || string(buf[:n]) != "hello" {
		t.Errorf("user.test xattr = %q, %v", buf[:n], err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(base, "home/app/data"), "trusted.evil", buf); err == nil {
		t.Error("trusted.evil xattr was kept")
	}
}

// checkOverlay mounts the image's layers and looks at the merged tree.
func checkOverlay(t *testing.T, img *Image) {
	t.Helper()
	target := t.TempDir()
	opts := "lowerdir=" + strings.Join(img.LowerDirs, ":")
	if err := unix.Mount("overlay", target, "overlay", unix.MS_RDONLY, opts); err != nil {
		t.Fatalf("mount overlay %s: %v", opts, err)
	}
	defer func() {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()
	for _, gone := range []string{"gone.txt", "opq/old.txt"} {
		if _, err := os.Lstat(filepath.Join(target, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is visible in the overlay: %v", gone, err)
		}
	}
	for p, want := range map[string]string{
		"keep/a.txt":    "kept\n",
		"keep/b.txt":    "second layer\n",
		"opq/new.txt":   "new\n",
		"hard":          "second layer\n",
		"link":          "kept\n",
		"home/app/data": "app data\n",
	} {
		if got := readFile(t, filepath.Join(target, p)); got != want {
			t.Errorf("%s in the overlay = %q, want %q", p, got, want)
		}
	}
	entries, err := os.ReadDir(filepath.Join(target, "opq"))
	if err != nil || len(entries) != 1 || entries[0].Name() != "new.txt" {
		t.Errorf("opq/ in the overlay = %v, %v; want just new.txt", entries, err)
	}
}

func TestImportSharesLayers(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t)
	base := baseLayer(t)
	first := testImage(t, v1.Config{User: "root"}, base, topLayer(t))
	other := mkTar(t, tarEntry{name: "other.txt", body: "another top\n"})
	second := testImage(t, v1.Config{User: "1001:50"}, base, other)

	var log1 logger
	a, err := s.Import(ctx, "first", bytes.NewReader(dockerSave(t, first)), nil, log1.logf)
	if err != nil {
		t.Fatal(err)
	}
	if a.UID != userUID || a.GID != userGID || !strings.Contains(log1.text(), "runs as root") {
		t.Errorf("root image: uid %d gid %d, log %q", a.UID, a.GID, log1.text())
	}
	if len(a.Env) != 1 || a.Env[0] != ociDefaultPath || a.WorkDir != "/" {
		t.Errorf("defaults: env %v workdir %q", a.Env, a.WorkDir)
	}

	var log2 logger
	dir := ociLayout(t, map[v1.Image][]layout.Option{second: nil})
	b, err := s.ImportPath(ctx, "second", dir, nil, log2.logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("log:\n%s", log2.text())
	if a.Layers[0] != b.Layers[0] || a.Layers[1] == b.Layers[1] {
		t.Errorf("layers %v and %v: want the first shared, the second not", a.Layers, b.Layers)
	}
	if a.LowerDirs[1] != b.LowerDirs[1] {
		t.Errorf("base layer dirs differ: %s, %s", a.LowerDirs[1], b.LowerDirs[1])
	}
	if !strings.Contains(log2.text(), "layer 1/2") || log2.count("(cached)") != 1 ||
		strings.Contains(strings.SplitN(log2.text(), "\n", 2)[1], "(cached)") {
		t.Errorf("log = %q, want only layer 1 cached", log2.text())
	}
	if b.UID != 1001 || b.GID != 50 {
		t.Errorf("second image runs as %d:%d, want 1001:50", b.UID, b.GID)
	}

	// Removing one image keeps the shared layer for the other.
	if err := s.Remove(ctx, "first", nil); err != nil {
		t.Fatal(err)
	}
	if !s.HasLayer(b.Layers[0]) || !s.HasLayer(b.Layers[1]) || s.HasLayer(a.Layers[1]) {
		t.Error("layer gc after removing the first image is wrong")
	}

	// A tar file on disk works as well.
	p := filepath.Join(t.TempDir(), "first.tar")
	if err := os.WriteFile(p, dockerSave(t, first), 0o644); err != nil {
		t.Fatal(err)
	}
	var log3 logger
	if _, err := s.ImportPath(ctx, "first", p, nil, log3.logf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log3.text(), "layer 1/2") || log3.count("(cached)") != 1 {
		t.Errorf("log = %q", log3.text())
	}
}

func TestImportReplace(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t)
	one := dockerSave(t, testImage(t, v1.Config{}, mkTar(t, tarEntry{name: "one"})))
	two := dockerSave(t, testImage(t, v1.Config{}, mkTar(t, tarEntry{name: "two"})))
	if _, err := s.Import(ctx, "img", bytes.NewReader(one), nil, nil); err != nil {
		t.Fatal(err)
	}
	refuse := func(old *Image) error { return errdefs.Conflict("image %q is in use", old.Name) }
	if _, err := s.Import(ctx, "img", bytes.NewReader(two), refuse, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Import over a refusing replace = %v", err)
	}
	// The same content again does not count as a replacement.
	if _, err := s.Import(ctx, "img", bytes.NewReader(one), refuse, nil); err != nil {
		t.Fatalf("re-import of the same image: %v", err)
	}
}

func TestImportPlatforms(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t)
	native := testImage(t, v1.Config{}, mkTar(t, tarEntry{name: "native"}))
	foreign := testImage(t, v1.Config{}, mkTar(t, tarEntry{name: "foreign"}))
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	dir := ociLayout(t, map[v1.Image][]layout.Option{
		native:  {layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})},
		foreign: {layout.WithPlatform(v1.Platform{OS: "linux", Architecture: other})},
	})
	img, err := s.ImportPath(ctx, "multi", dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.LayerDir(img.Layers[0]), "native")); err != nil {
		t.Errorf("imported the wrong image: %v", err)
	}

	dir = ociLayout(t, map[v1.Image][]layout.Option{
		native:  {layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "s390x"})},
		foreign: {layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "ppc64le"})},
	})
	if _, err := s.ImportPath(ctx, "multi", dir, nil, nil); !errors.Is(err, errdefs.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "none for linux/"+runtime.GOARCH) {
		t.Errorf("import with no native image = %v", err)
	}
}

func TestImportBadLayers(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t)
	layer := mkTar(t, tarEntry{name: "file", body: "content"})
	sum := sha256.Sum256(layer)
	good := fmt.Sprintf("sha256:%x", sum)

	// The hand-written docker archive itself is fine.
	img, err := s.Import(ctx, "handmade", bytes.NewReader(dockerArchive(t, [][]byte{layer}, []string{good}, map[string]any{"User": "1234"})), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if img.UID != 1234 || img.GID != 0 || readFile(t, filepath.Join(s.LayerDir(img.Layers[0]), "file")) != "content" {
		t.Errorf("image = %+v", img)
	}

	// A layer whose content is not what its diff id says is refused and
	// leaves no layer behind: it must not poison the cache.
	lie := fmt.Sprintf("sha256:%x", sha256.Sum256([]byte("something else")))
	_, err = s.Import(ctx, "liar", bytes.NewReader(dockerArchive(t, [][]byte{layer}, []string{lie}, nil)), nil, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("mismatching diff id: %v", err)
	}
	h, _ := v1.NewHash(lie)
	if s.HasLayer(ChainID("", "oci:"+h.String())) {
		t.Error("a layer with the wrong content was committed")
	}

	// Layers with their true diff ids, so that their content is read (a
	// layer already in the store is not read again).
	withDiffID := func(layer []byte) []byte {
		return dockerArchive(t, [][]byte{layer}, []string{fmt.Sprintf("sha256:%x", sha256.Sum256(layer))}, nil)
	}
	for what, archive := range map[string][]byte{
		"escaping layer":  withDiffID(mkTar(t, tarEntry{name: "../escape"})),
		"corrupt layer":   withDiffID([]byte("not a tar archive")),
		"truncated layer": withDiffID(mkTar(t, tarEntry{name: "big", body: strings.Repeat("x", 5000)})[:3000]),
		"bad diff id":     dockerArchive(t, [][]byte{layer}, []string{"sha256:xyz"}, nil),
		"missing layer":   dockerArchive(t, nil, []string{good}, nil),
		"unknown user":    dockerArchive(t, [][]byte{layer}, []string{good}, map[string]any{"User": "nobody"}),
		"two images":      twoImageArchive(t),
		"gzip of garbage": gzipBytes(t, []byte("garbage")),
	} {
		if _, err := s.Import(ctx, "bad", bytes.NewReader(archive), nil, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: Import = %v, want ErrInvalidArgument", what, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	// An OCI layout that lacks a layer blob.
	img2 := testImage(t, v1.Config{}, mkTar(t, tarEntry{name: "blob-gone"}))
	dir := ociLayout(t, map[v1.Image][]layout.Option{img2: nil})
	ls, err := img2.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := ls[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "blobs", d.Algorithm, d.Hex)); err != nil {
		t.Fatal(err)
	}
	_, err = s.Import(ctx, "bad", bytes.NewReader(tarDir(t, dir)), nil, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "lacks this blob") || strings.Contains(err.Error(), s.Dir()) {
		t.Errorf("missing layer blob: %v", err)
	} else {
		t.Logf("missing layer blob: %v", err)
	}

	if _, err := s.Get(ctx, "bad"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(bad) = %v", err)
	}
	if err := filepath.WalkDir(s.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tmpPrefix+"import-") {
			t.Errorf("leftover %s", p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// twoImageArchive is a docker save archive of two images.
func twoImageArchive(t testing.TB) []byte {
	a := testImage(t, v1.Config{}, mkTar(t, tarEntry{name: "a"}))
	b := testImage(t, v1.Config{}, mkTar(t, tarEntry{name: "b"}))
	ta, _ := name.NewTag("forkbox.test/a:1")
	tb, _ := name.NewTag("forkbox.test/b:1")
	var buf bytes.Buffer
	if err := tarball.MultiWrite(map[name.Tag]v1.Image{ta: a, tb: b}, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestResolveUser(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t)
	commit := func(parent string, ents ...tarEntry) string {
		t.Helper()
		b := mkTar(t, ents...)
		id := ChainID(parent, fmt.Sprintf("test:%x", sha256.Sum256(b)))
		err := s.CommitLayer(ctx, &Layer{ID: id, Parent: parent}, func(dir string) error {
			return ExtractTar(ctx, bytes.NewReader(b), dir, ExtractOptions{Whiteouts: true, KeepOwners: true})
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	l1 := commit("",
		tarEntry{name: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\nold:x:700:700::/:/bin/sh\n"},
		tarEntry{name: "etc/group", body: "root:x:0:\nold:x:700:\n"})
	l2 := commit(l1,
		tarEntry{name: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\nnew:x:800:801::/:/bin/sh\n"})
	l3 := commit(l2, tarEntry{name: "etc/.wh.passwd"})
	l4 := commit(l3, tarEntry{name: "etc/", typ: tar.TypeDir}, tarEntry{name: "etc/.wh..wh..opq"},
		tarEntry{name: "etc/hostname", body: "x\n"})
	l5 := commit(l1, tarEntry{name: "etc", typ: tar.TypeSymlink, link: "/"})

	for _, tc := range []struct {
		layers   []string
		user     string
		uid, gid int
		bad      bool
	}{
		{[]string{l1}, "", 0, 0, false},
		{[]string{l1}, "old", 700, 700, false},
		{[]string{l1}, "old:root", 700, 0, false},
		{[]string{l1}, "700", 700, 700, false},
		{[]string{l1}, "4242", 4242, 0, false},
		{[]string{l1}, "4242:17", 4242, 17, false},
		{[]string{l1}, "new", 0, 0, true},
		{[]string{l1}, "old:nogroup", 0, 0, true},
		{[]string{l1, l2}, "new", 800, 801, false}, // the top-most passwd wins
		{[]string{l1, l2}, "old", 0, 0, true},
		{[]string{l1, l2}, "new:old", 800, 700, false}, // group from the lower layer
		{[]string{l1, l2, l3}, "new", 0, 0, true},      // whited out
		{[]string{l1, l2, l3, l4}, "old", 0, 0, true},  // behind an opaque etc/
		{[]string{l1, l2, l3, l4}, "1:1", 1, 1, false},
		{[]string{l1, l5}, "old", 0, 0, true}, // a symlinked etc is not followed
		{[]string{l5}, "root", 0, 0, false},   // no passwd, but root is root
		{[]string{l5}, "root:root", 0, 0, true},
		{[]string{l1}, ":5", 0, 0, true},
		{[]string{l1}, "old:", 0, 0, true},
	} {
		uid, gid, err := s.resolveUser(tc.layers, tc.user)
		switch {
		case tc.bad && !errors.Is(err, errdefs.ErrInvalidArgument):
			t.Errorf("resolveUser(%d layers, %q) = %d:%d, %v; want ErrInvalidArgument", len(tc.layers), tc.user, uid, gid, err)
		case !tc.bad && (err != nil || uid != tc.uid || gid != tc.gid):
			t.Errorf("resolveUser(%d layers, %q) = %d:%d, %v; want %d:%d", len(tc.layers), tc.user, uid, gid, err, tc.uid, tc.gid)
		}
	}
}

// extractErr extracts ents into a fresh root beside an "outside" directory
// and returns the root, the outside directory and the error.
func extractErr(t *testing.T, opts ExtractOptions, ents ...tarEntry) (string, string, error) {
	t.Helper()
	top := t.TempDir()
	root, outside := filepath.Join(top, "root"), filepath.Join(top, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "target.txt"), []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range ents {
		ents[i].name = strings.ReplaceAll(ents[i].name, "OUTSIDE", outside)
		ents[i].link = strings.ReplaceAll(ents[i].link, "OUTSIDE", outside)
	}
	err := ExtractTar(context.Background(), bytes.NewReader(mkTar(t, ents...)), root, opts)
	return root, outside, err
}

// checkOutside fails if anything but target.txt, unchanged, is in outside.
func checkOutside(t *testing.T, outside string) {
	t.Helper()
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "target.txt" {
		t.Errorf("outside holds %v", entries)
	}
	if got := readFile(t, filepath.Join(outside, "target.txt")); got != "original" {
		t.Errorf("outside/target.txt = %q", got)
	}
	if isOpaqueDir(outside) {
		t.Error("outside was marked opaque")
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(outside), "escape")); err == nil {
		t.Error("escape was written beside the root")
	}
}

func TestExtractTarEscapes(t *testing.T) {
	requireRoot(t)
	layer := ExtractOptions{Whiteouts: true, KeepOwners: true}
	for what, ents := range map[string][]tarEntry{
		"dotdot":                 {{name: "../escape"}},
		"dotdot deep":            {{name: "a/b/../../../escape"}},
		"absolute":               {{name: "OUTSIDE/escape"}},
		"absolute symlink":       {{name: "a", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "a/escape"}},
		"relative symlink":       {{name: "a", typ: tar.TypeSymlink, link: "../outside"}, {name: "a/escape"}},
		"symlink chain":          {{name: "b", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "a", typ: tar.TypeSymlink, link: "b"}, {name: "a/x/escape"}},
		"symlink then dir":       {{name: "a", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "a/sub/", typ: tar.TypeDir}},
		"symlink then symlink":   {{name: "a", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "a/escape", typ: tar.TypeSymlink, link: "/etc/passwd"}},
		"proc magic link":        {{name: "a", typ: tar.TypeSymlink, link: "/proc/self/cwd"}, {name: "a/escape"}},
		"hardlink outside":       {{name: "h", typ: tar.TypeLink, link: "../outside/target.txt"}},
		"hardlink absolute":      {{name: "h", typ: tar.TypeLink, link: "OUTSIDE/target.txt"}},
		"hardlink via symlink":   {{name: "a", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "h", typ: tar.TypeLink, link: "a/target.txt"}},
		"whiteout via symlink":   {{name: "a", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "a/.wh.target.txt"}},
		"opaque via symlink":     {{name: "a", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "a/.wh..wh..opq"}},
		"device via symlink":     {{name: "a", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "a/escape", typ: tar.TypeChar, major: 1, minor: 3}},
		"hardlink to missing":    {{name: "h", typ: tar.TypeLink, link: "nothing"}},
		"file over parent":       {{name: "f"}, {name: "f/escape"}},
		"dangling symlink dir":   {{name: "a", typ: tar.TypeSymlink, link: "missing"}, {name: "a/escape"}},
		"whiteout of dotdot":     {{name: ".wh.."}},
		"file named like root":   {{name: "."}},
		"symlink with no target": {{name: "s", typ: tar.TypeSymlink}},
	} {
		t.Run(what, func(t *testing.T) {
			root, outside, err := extractErr(t, layer, ents...)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ExtractTar = %v, want ErrInvalidArgument", err)
			} else {
				t.Log(err)
			}
			checkOutside(t, outside)
			if _, err := os.Lstat(filepath.Join(root, "escape")); err == nil {
				t.Error("escape landed in the root instead")
			}
		})
	}

	// Replacing a symlink by a file replaces the link, never its target.
	root, outside, err := extractErr(t, layer,
		tarEntry{name: "s", typ: tar.TypeSymlink, link: "OUTSIDE/target.txt"},
		tarEntry{name: "s", body: "pwned"},
		tarEntry{name: "d", typ: tar.TypeSymlink, link: "OUTSIDE"},
		tarEntry{name: "d", typ: tar.TypeDir},
		tarEntry{name: "d/inside", body: "in"},
		tarEntry{name: "w", typ: tar.TypeSymlink, link: "OUTSIDE/target.txt"},
		tarEntry{name: ".wh.w"},
		tarEntry{name: "h", typ: tar.TypeSymlink, link: "OUTSIDE/target.txt"},
		tarEntry{name: "hl", typ: tar.TypeLink, link: "h"})
	if err != nil {
		t.Fatal(err)
	}
	checkOutside(t, outside)
	if got := readFile(t, filepath.Join(root, "s")); got != "pwned" {
		t.Errorf("s = %q", got)
	}
	if got := readFile(t, filepath.Join(root, "d", "inside")); got != "in" {
		t.Errorf("d/inside = %q", got)
	}
	if st := lstat(t, filepath.Join(root, "w")); st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Errorf("w: mode %o, want a whiteout", st.Mode)
	}
	// A hardlink to a symlink links the symlink itself.
	if st := lstat(t, filepath.Join(root, "hl")); st.Mode&unix.S_IFMT != unix.S_IFLNK || st.Nlink != 2 {
		t.Errorf("hl: mode %o nlink %d", st.Mode, st.Nlink)
	}

	// A symlink that stays inside is followed, inside.
	root, outside, err = extractErr(t, layer,
		tarEntry{name: "real/", typ: tar.TypeDir},
		tarEntry{name: "in", typ: tar.TypeSymlink, link: "real"},
		tarEntry{name: "in/f", body: "via link"},
		tarEntry{name: "up", typ: tar.TypeSymlink, link: "real/../real"},
		tarEntry{name: "up/g", body: "via dotdot link"})
	if err != nil {
		t.Fatal(err)
	}
	checkOutside(t, outside)
	if readFile(t, filepath.Join(root, "real", "f")) != "via link" || readFile(t, filepath.Join(root, "real", "g")) != "via dotdot link" {
		t.Error("files through an inside symlink went astray")
	}
}

func TestExtractTarReplaces(t *testing.T) {
	requireRoot(t)
	root, _, err := extractErr(t, ExtractOptions{Whiteouts: true, KeepOwners: true},
		tarEntry{name: "x/deep/file", body: "1"},
		tarEntry{name: "x", body: "file now"}, // a file replaces a tree
		tarEntry{name: "y", body: "file"},
		tarEntry{name: "y/", typ: tar.TypeDir, mode: 0o700}, // a dir replaces a file
		tarEntry{name: "y/z", body: "z"},
		tarEntry{name: "m/", typ: tar.TypeDir},
		tarEntry{name: "m/a", body: "a"},
		tarEntry{name: "m/", typ: tar.TypeDir, mode: 0o711, uid: 5, gid: 6}, // dirs merge
		tarEntry{name: "f", body: "old"},
		tarEntry{name: "f", body: "new", mode: 0o755},
		tarEntry{name: "./", typ: tar.TypeDir, mode: 0o751},
	)
	if err != nil {
		t.Fatal(err)
	}
	if readFile(t, filepath.Join(root, "x")) != "file now" || readFile(t, filepath.Join(root, "y", "z")) != "z" ||
		readFile(t, filepath.Join(root, "m", "a")) != "a" || readFile(t, filepath.Join(root, "f")) != "new" {
		t.Error("later entries did not replace earlier ones")
	}
	if st := lstat(t, filepath.Join(root, "m")); st.Mode != unix.S_IFDIR|0o711 || st.Uid != 5 || st.Gid != 6 {
		t.Errorf("m: mode %o %d:%d", st.Mode, st.Uid, st.Gid)
	}
	if st := lstat(t, filepath.Join(root, "f")); st.Mode != unix.S_IFREG|0o755 {
		t.Errorf("f: mode %o", st.Mode)
	}
	if st := lstat(t, root); st.Mode != unix.S_IFDIR|0o751 || st.Mtim.Sec != testMtime.Unix() {
		t.Errorf("root: mode %o mtime %d", st.Mode, st.Mtim.Sec)
	}
}

// TestExtractTarBuildContext extracts as for a build context: gzipped,
// owners dropped, devices skipped, whiteouts left as files.
func TestExtractTarBuildContext(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	archive := gzipBytes(t, mkTar(t,
		tarEntry{name: "src/main.py", body: "print(1)\n", uid: 1234, gid: 99},
		tarEntry{name: ".wh.notes", body: "not a whiteout here"},
		tarEntry{name: "dev/sda", typ: tar.TypeBlock, major: 8, minor: 0, mode: 0o666},
		tarEntry{name: "dev/null", typ: tar.TypeChar, major: 1, minor: 3, mode: 0o666},
		tarEntry{name: "run.sh", body: "#!/bin/sh\n", mode: 0o755, xattrs: map[string]string{"security.selinux": "x"}},
	))
	// git archive starts with a pax global header.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "abc"}}); err != nil {
		t.Fatal(err)
	}
	if err := tw.WriteHeader(&tar.Header{Name: "README", Size: 2, Mode: 0o644, ModTime: testMtime}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	opts := ExtractOptions{}
	if err := ExtractTar(ctx, bytes.NewReader(archive), dir, opts); err != nil {
		t.Fatal(err)
	}
	if err := ExtractTar(ctx, &buf, dir, opts); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, filepath.Join(dir, "src/main.py")); st.Uid != 0 || st.Gid != 0 {
		t.Errorf("src/main.py owned by %d:%d", st.Uid, st.Gid)
	}
	if got := readFile(t, filepath.Join(dir, ".wh.notes")); got != "not a whiteout here" {
		t.Errorf(".wh.notes = %q", got)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "dev"))
	if len(entries) != 0 {
		t.Errorf("devices were created: %v", entries)
	}
	if readFile(t, filepath.Join(dir, "README")) != "hi" {
		t.Error("README missing")
	}

	// Garbage is ErrInvalidArgument, with the reason.
	for what, bad := range map[string][]byte{
		"text":      []byte(strings.Repeat("garbage ", 100)),
		"truncated": mkTar(t, tarEntry{name: "big", body: strings.Repeat("x", 5000)})[:2000],
		"bad gzip":  gzipBytes(t, []byte("x"))[:12],
	} {
		err := ExtractTar(ctx, bytes.NewReader(bad), t.TempDir(), opts)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: ExtractTar = %v, want ErrInvalidArgument", what, err)
		}
	}

	// A cancelled context stops it.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := ExtractTar(cctx, bytes.NewReader(archive), t.TempDir(), opts); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestImportOCIMediaTypes imports an image with OCI media types throughout.
func TestImportOCIMediaTypes(t *testing.T) {
	requireRoot(t)
	img := testImage(t, v1.Config{WorkingDir: "/srv"}, mkTar(t, tarEntry{name: "srv/app", body: "x"}))
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	s := openStore(t)
	got, err := s.Import(context.Background(), "oci-types", bytes.NewReader(tarDir(t, ociLayout(t, map[v1.Image][]layout.Option{img: nil}))), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.WorkDir != "/srv" || len(got.Layers) != 1 {
		t.Errorf("image = %+v", got)
	}
}
