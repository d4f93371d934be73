//go:build linux

package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// Archives are hostile: image layers come from whoever calls POST
// /v1/images, build contexts likewise. Whatever their bytes, extraction
// must end, write nothing outside its directory, write no more than the
// archive holds, and refuse what it cannot take as the caller's mistake.

// FuzzCleanEntryName checks that an archive entry name cleanEntryName
// accepts is a clean relative path inside the archive, and that it refuses
// exactly the empty, NUL-holding, absolute and climbing names.
func FuzzCleanEntryName(f *testing.F) {
	for _, s := range []string{"a", "./a/", "a/../b", "../a", "a/../../b", "/etc/passwd", ".", "./", "", "a\x00", "..a", "a/..", "//", ".wh..wh..opq"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := cleanEntryName(name)
		c := path.Clean(name)
		bad := name == "" || strings.ContainsRune(name, 0) || strings.HasPrefix(c, "/") || c == ".." || strings.HasPrefix(c, "../")
		if bad != (err != nil) {
			t.Fatalf("cleanEntryName(%q) = %q, %v; want an error: %v", name, got, err, bad)
		}
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("cleanEntryName(%q) = %v, not invalid_argument", name, err)
			}
			return
		}
		if got == "" {
			if c != "." {
				t.Fatalf("cleanEntryName(%q) = the root", name)
			}
			return
		}
		if strings.HasPrefix(got, "/") || got != path.Clean(got) {
			t.Fatalf("cleanEntryName(%q) = %q: not clean and relative", name, got)
		}
		for _, el := range strings.Split(got, "/") {
			if el == ".." || el == "." {
				t.Fatalf("cleanEntryName(%q) = %q: has a %s element", name, got, el)
			}
		}
	})
}

// fuzzEntry is one entry of a seed archive.
type fuzzEntry struct {
	name, link, body string
	typ              byte
	pax              map[string]string
}

func fuzzTar(ents ...fuzzEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, ModTime: time.Unix(1700000000, 0), PAXRecords: e.pax}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if hdr.Typeflag == tar.TypeChar {
			hdr.Devmajor, hdr.Devminor = 1, 3
		}
		if err := tw.WriteHeader(hdr); err != nil {
			panic(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return buf.Bytes()
}

// gnuSparse is a one-entry archive in the old GNU sparse format: one byte
// of data, then a hole up to size. tar.Writer cannot write it.
func gnuSparse(name string, size int64) []byte {
	octal := func(b []byte, n int64) {
		s := []byte(strings.Repeat("0", len(b)-1))
		for i := len(s) - 1; n > 0; i-- {
			s[i] = byte('0' + n%8)
			n /= 8
		}
		copy(b, s)
	}
	var h [512]byte
	copy(h[0:], name)
	octal(h[100:108], 0o644)
	octal(h[108:116], 0)
	octal(h[116:124], 0)
	octal(h[124:136], 1)
	octal(h[136:148], 1700000000)
	h[156] = tar.TypeGNUSparse
	copy(h[257:], "ustar  \x00")
	octal(h[386:398], 0) // the data: offset 0, 1 byte
	octal(h[398:410], 1)
	octal(h[483:495], size)
	copy(h[148:156], "        ")
	var sum int64
	for _, c := range h {
		sum += int64(c)
	}
	octal(h[148:155], sum)
	out := append(h[:], 'x')
	return append(out, make([]byte, 511+1024)...)
}

// FuzzExtractTar extracts any bytes, as a layer (whiteouts, owners and
// device nodes kept: needs root) or as a build context, into a directory
// beside an "outside" one. It checks: no panic; an error is invalid_argument
// (a 400); nothing outside the directory changes; the files written hold
// no more bytes than the archive, uncompressed, carried.
func FuzzExtractTar(f *testing.F) {
	for _, s := range [][]byte{
		fuzzTar(fuzzEntry{name: "a/b.txt", body: "hello"}, fuzzEntry{name: "a/", typ: tar.TypeDir}, fuzzEntry{name: "l", typ: tar.TypeSymlink, link: "a/b.txt"}, fuzzEntry{name: "h", typ: tar.TypeLink, link: "a/b.txt"}),
		fuzzTar(fuzzEntry{name: "../outside/target.txt", body: "pwned"}),
		fuzzTar(fuzzEntry{name: "a", typ: tar.TypeSymlink, link: "../outside"}, fuzzEntry{name: "a/target.txt", body: "pwned"}),
		fuzzTar(fuzzEntry{name: "a", typ: tar.TypeSymlink, link: "../outside"}, fuzzEntry{name: "a/.wh.target.txt"}, fuzzEntry{name: "a/.wh..wh..opq"}),
		fuzzTar(fuzzEntry{name: "a", typ: tar.TypeSymlink, link: "/tmp"}, fuzzEntry{name: "a/escape", typ: tar.TypeChar}),
		fuzzTar(fuzzEntry{name: "h", typ: tar.TypeLink, link: "../outside/target.txt"}),
		fuzzTar(fuzzEntry{name: "d/", typ: tar.TypeDir}, fuzzEntry{name: "d/.wh.x"}, fuzzEntry{name: "d", body: "now a file"}, fuzzEntry{name: "d/x", body: "under a file"}),
		fuzzTar(fuzzEntry{name: "x", body: "1", pax: map[string]string{"SCHILY.xattr.user.k": "v", "SCHILY.xattr.trusted.overlay.opaque": "y", "SCHILY.xattr.security.capability": "junk"}}),
		fuzzTar(fuzzEntry{name: "./", typ: tar.TypeDir}, fuzzEntry{name: ".", body: "the root as a file"}),
		fuzzTar(fuzzEntry{name: "f", typ: tar.TypeFifo}, fuzzEntry{name: "f/x", body: "1"}),
		fuzzTar(fuzzEntry{name: strings.Repeat("n", 300), body: "long name"}),
		fuzzTar(fuzzEntry{name: "s", typ: tar.TypeSymlink, link: strings.Repeat("x/", 2100)}),
		fuzzTar(fuzzEntry{name: "x", body: "1", pax: map[string]string{"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "sparse", "GNU.sparse.realsize": "1099511627776"}}),
		gnuSparse("sparse", 64<<20),
		[]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"),
		[]byte("not a tar"),
		nil,
	} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(3))
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(fuzzTar(fuzzEntry{name: "z/y", body: strings.Repeat("z", 5000)}))
	zw.Close()
	f.Add(gz.Bytes(), uint8(1))
	root := os.Geteuid() == 0
	scratch := scratchDir(f)
	f.Fuzz(func(t *testing.T, data []byte, flags uint8) {
		opts := ExtractOptions{Whiteouts: flags&1 != 0, KeepOwners: flags&2 != 0}
		if opts.KeepOwners && !root {
			// Keeping owners and making device nodes needs root; as
			// anyone else the failure would be this host's, not the
			// archive's.
			opts.KeepOwners = false
		}
		top, err := os.MkdirTemp(scratch, "")
		if err != nil {
			t.Fatal(err)
		}
		defer removeTree(t, top)
		dir, outside := filepath.Join(top, "root"), filepath.Join(top, "outside")
		if err := os.Mkdir(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(outside, "target.txt")
		if err := os.WriteFile(target, []byte("original"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := snapshotOutside(t, outside)

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		err = ExtractTar(ctx, bytes.NewReader(data), dir, opts)
		if ctx.Err() != nil {
			t.Fatalf("ExtractTar(%s) did not end in time: %v", short(data), err)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			s, _ := errdefs.HTTPStatus(err)
			t.Fatalf("ExtractTar(%s, %+v) = %v: a %d, not invalid_argument", short(data), opts, err, s)
		}

		if after := snapshotOutside(t, outside); after != before {
			t.Fatalf("ExtractTar(%s) changed the directory beside its own:\nbefore %s\nafter  %s", short(data), before, after)
		}
		names, err2 := os.ReadDir(top)
		if err2 != nil {
			t.Fatal(err2)
		}
		for _, e := range names {
			if e.Name() != "root" && e.Name() != "outside" {
				t.Fatalf("ExtractTar(%s) made %s beside its directory", short(data), e.Name())
			}
		}
		if written, limit := regularBytes(t, dir), streamLen(data); written > limit {
			t.Fatalf("ExtractTar(%s) wrote %d bytes of files from an archive of %d bytes", short(data), written, limit)
		}
	})
}

// scratchDir returns a directory for FuzzExtractTar's trees: in memory
// (/dev/shm) when there is one, which makes the fuzzer several times
// faster than a disk.
func scratchDir(f *testing.F) string {
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "forkbox-fuzz-")
	if err != nil {
		dir = f.TempDir()
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// removeTree removes an extracted tree, first making every directory in it
// writable: an archive may leave directories of mode 0, which only root
// could empty as they are.
func removeTree(t *testing.T, dir string) {
	var open func(p string)
	open = func(p string) {
		os.Chmod(p, 0o700)
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			if e.IsDir() {
				open(filepath.Join(p, e.Name()))
			}
		}
	}
	open(dir)
	if err := os.RemoveAll(dir); err != nil {
		t.Errorf("removing the extracted tree: %v", err)
	}
}

// short quotes the start of an archive for a message: the names in its
// first headers, without the kilobytes of padding.
func short(data []byte) string {
	return fmt.Sprintf("%d bytes %q", len(data), bytes.ReplaceAll(data[:min(len(data), 1024)], []byte{0}, nil))
}

// snapshotOutside describes the outside directory: names, modes, sizes,
// contents and xattrs, so that any change shows.
func snapshotOutside(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %d:%d %d ", p, fi.Mode(), st.Uid, st.Gid, fi.Size())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			b.Write(c)
		}
		buf := make([]byte, 4096)
		if n, err := unix.Llistxattr(p, buf); err == nil {
			b.Write(buf[:n])
		}
		b.WriteString(";")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// regularBytes sums the sizes of the regular files under dir, counting
// hardlinked files once.
func regularBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	seen := map[uint64]bool{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !seen[st.Ino] {
			seen[st.Ino] = true
			total += fi.Size()
		}
		return nil
	})
	return total
}

// streamLen is how many bytes the tar stream in data holds: data itself,
// or what it decompresses to when it is gzipped.
func streamLen(data []byte) int64 {
	if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
		return int64(len(data))
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return int64(len(data))
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(zr, 1<<30))
	return max(n, int64(len(data)))
}

// FuzzImport imports any bytes as an image archive into a real store. It
// checks: no panic, no hang; an error is invalid_argument (or too_large, a
// bound of the store); an image that imports is registered and its layers
// exist.
func FuzzImport(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs root: image layers keep their owners")
	}
	layer := fuzzTar(fuzzEntry{name: "etc/", typ: tar.TypeDir}, fuzzEntry{name: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\nu:x:1000:1000::/home/u:/bin/sh\n"}, fuzzEntry{name: "bin/x", body: "#!/bin/sh\n"})
	img := testImage(f, v1.Config{User: "u", Env: []string{"A=1"}, WorkingDir: "/w"}, layer)
	f.Add(dockerSave(f, img))
	f.Add(tarDir(f, ociLayout(f, map[v1.Image][]layout.Option{img: nil})))
	f.Add(fuzzTar(fuzzEntry{name: "manifest.json", body: `[{"Config":"c.json","Layers":["l.tar"]}]`}, fuzzEntry{name: "c.json", body: `{"rootfs":{"type":"layers","diff_ids":["sha256:00"]}}`}, fuzzEntry{name: "l.tar", body: "x"}))
	f.Add(fuzzTar(fuzzEntry{name: "oci-layout", body: `{"imageLayoutVersion":"1.0.0"}`}, fuzzEntry{name: "index.json", body: `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:` + strings.Repeat("0", 64) + `","size":2}]}`}))
	f.Add(fuzzTar(fuzzEntry{name: "manifest.json", body: "[]"}, fuzzEntry{name: "../index.json", body: "{}"}))
	f.Add(gnuSparse("manifest.json", 1<<30))
	// A docker archive whose layer is a sparse entry of 8 GiB in a few
	// kilobytes.
	var docker bytes.Buffer
	tw := tar.NewWriter(&docker)
	for _, e := range []fuzzEntry{
		{name: "manifest.json", body: `[{"Config":"config.json","RepoTags":["x:1"],"Layers":["layer.tar"]}]`},
		{name: "config.json", body: `{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:` + strings.Repeat("0", 64) + `"]}}`},
	} {
		tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(e.body))
	}
	tw.Flush() // no end-of-archive marker: the sparse entry follows
	f.Add(append(docker.Bytes(), gnuSparse("layer.tar", 1<<33-1)...))
	f.Add([]byte{})
	s, err := Open(filepath.Join(f.TempDir(), "images"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		im, err := s.Import(ctx, "fuzzed", bytes.NewReader(data), nil, nil)
		if ctx.Err() != nil {
			t.Fatalf("Import did not end in time: %v", err)
		}
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrTooLarge) {
				st, _ := errdefs.HTTPStatus(err)
				t.Fatalf("Import(%s) = %v: a %d, not invalid_argument or too_large", short(data), err, st)
			}
			return
		}
		got, err := s.Get(ctx, "fuzzed")
		if err != nil || got.ID != im.ID {
			t.Fatalf("imported %+v, but Get says %+v, %v", im, got, err)
		}
		for _, l := range im.Layers {
			if !s.HasLayer(l) {
				t.Fatalf("image %+v lacks its layer %s", im, l)
			}
		}
	})
}
