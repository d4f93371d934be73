package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// tarEntry describes one entry of a test archive.
type tarEntry struct {
	name   string
	typ    byte // tar.TypeReg when 0
	body   string
	link   string
	mode   int64 // 0644 (files) or 0755 (dirs) when 0
	uid    int
	gid    int
	xattrs map[string]string
	major  int64
	minor  int64
}

// testMtime is the modification time of every test archive entry.
var testMtime = time.Unix(1700000000, 0)

// mkTar returns an uncompressed tar of ents, in order.
func mkTar(t testing.TB, ents ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		hdr := &tar.Header{
			Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, ModTime: testMtime, Devmajor: e.major, Devminor: e.minor,
			Format: tar.FormatPAX,
		}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
			if hdr.Typeflag == tar.TypeDir {
				hdr.Mode = 0o755
			}
		}
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if len(e.xattrs) > 0 {
			hdr.PAXRecords = map[string]string{}
			for k, v := range e.xattrs {
				hdr.PAXRecords["SCHILY.xattr."+k] = v
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %s: %v", e.name, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCleanEntryName(t *testing.T) {
	for in, want := range map[string]string{
		"a":          "a",
		"./a/b/":     "a/b",
		"a/../b":     "b",
		".":          "",
		"./":         "",
		"a//b/./c":   "a/b/c",
		"a/b/../../": "",
	} {
		got, err := cleanEntryName(in)
		if err != nil || got != want {
			t.Errorf("cleanEntryName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "/etc/passwd", "../x", "a/../../x", "..", "/", "a\x00b"} {
		if got, err := cleanEntryName(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("cleanEntryName(%q) = %q, %v; want ErrInvalidArgument", bad, got, err)
		}
	}
}

func TestParseID(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "1000": 1000, "2147483646": 2147483646} {
		if got, ok := parseID(in); !ok || got != want {
			t.Errorf("parseID(%q) = %d, %v", in, got, ok)
		}
	}
	for _, bad := range []string{"", "-1", "x", "2147483647", "4294967295", "1e3", " 1"} {
		if got, ok := parseID(bad); ok {
			t.Errorf("parseID(%q) = %d, want failure", bad, got)
		}
	}
}

func TestParseColonFile(t *testing.T) {
	data := []byte("# comment\nroot:x:0:0:root:/root:/bin/sh\r\n\nshort:x\napp:x:1001:1002::/home/app:/bin/sh")
	got := parseColonFile(data, 4)
	if len(got) != 2 || got[0][0] != "root" || got[1][0] != "app" || got[1][3] != "1002" || got[0][6] != "/bin/sh" {
		t.Errorf("parseColonFile = %q", got)
	}
}

// TestImportGarbage feeds Import what is no image archive.
func TestImportGarbage(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	random := make([]byte, 4096)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	badJSON := mkTar(t, tarEntry{name: "manifest.json", body: "[{"})
	for name, archive := range map[string][]byte{
		"empty":            nil,
		"text":             []byte("this is not a tar archive at all"),
		"random":           random,
		"gzipped garbage":  gzipBytes(t, []byte("not a tar either, only compressed")),
		"truncated gzip":   gzipBytes(t, random)[:100],
		"tar of nothing":   mkTar(t, tarEntry{name: "hello.txt", body: "hi"}),
		"corrupt manifest": badJSON,
		"missing blobs": mkTar(t, tarEntry{name: "manifest.json",
			body: `[{"Config":"config.json","RepoTags":["x:latest"],"Layers":["l1/layer.tar"]}]`}),
		"oci without blobs": mkTar(t,
			tarEntry{name: "oci-layout", body: `{"imageLayoutVersion":"1.0.0"}`},
			tarEntry{name: "index.json", body: `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":10,"digest":"sha256:` + strings.Repeat("ab", 32) + `"}]}`}),
		"oci corrupt index": mkTar(t,
			tarEntry{name: "oci-layout", body: `{"imageLayoutVersion":"1.0.0"}`},
			tarEntry{name: "index.json", body: `{"schemaVersion":`}),
		"oci with a symlink": mkTar(t,
			tarEntry{name: "oci-layout", body: `{"imageLayoutVersion":"1.0.0"}`},
			tarEntry{name: "index.json", typ: tar.TypeSymlink, link: "/etc/passwd"}),
	} {
		_, err := s.Import(ctx, "garbage", bytes.NewReader(archive), nil, nil)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: Import = %v, want ErrInvalidArgument", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if _, err := s.Get(ctx, "garbage"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after failed imports = %v, want ErrNotFound", err)
	}
	if _, err := s.Import(ctx, "Bad/Name", bytes.NewReader(nil), nil, nil); !errors.Is(err, errdefs.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "invalid image name") {
		t.Errorf("Import(bad name) = %v, want the name error", err)
	}
}

// dockerArchive hand-writes a `docker save` archive with uncompressed layers
// (as docker before 25 wrote them) and the given config diff ids.
func dockerArchive(t testing.TB, layers [][]byte, diffIDs []string, cfg map[string]any) []byte {
	t.Helper()
	config := map[string]any{
		"architecture": "amd64", "os": "linux", "config": cfg,
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	}
	cj, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	var ents []tarEntry
	for i, l := range layers {
		p := fmt.Sprintf("l%d/layer.tar", i)
		paths = append(paths, p)
		ents = append(ents, tarEntry{name: fmt.Sprintf("l%d/", i), typ: tar.TypeDir}, tarEntry{name: p, body: string(l)})
	}
	mj, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{"test:latest"}, "Layers": paths}})
	if err != nil {
		t.Fatal(err)
	}
	ents = append(ents, tarEntry{name: "config.json", body: string(cj)}, tarEntry{name: "manifest.json", body: string(mj)})
	return mkTar(t, ents...)
}
