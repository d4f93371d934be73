package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// storeFiles lists every path under the store's directory but its lock
// file, which a failed import may create and which holds nothing.
func storeFiles(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(s.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.Dir(), p)
		if rel != "." && rel != ".lock" {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func manyFiles(n int) []tarEntry {
	ents := []tarEntry{{name: "many/", typ: tar.TypeDir}}
	for i := 0; i < n; i++ {
		ents = append(ents, tarEntry{name: fmt.Sprintf("many/f%d", i)})
	}
	return ents
}

// noise is n bytes that do not compress.
func noise(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return string(b)
}

func diffID(layer []byte) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256(layer))
}

// zeros is a layer of one file of n zero bytes: gzip makes it ~n/1000.
func zeros(t testing.TB, n int) []byte {
	return mkTar(t, tarEntry{name: "zeros", body: string(make([]byte, n))})
}

// On the old main none of these was bounded: an archive of a few hundred
// kilobytes expanded to whatever its gzip held, and a layer to any number
// of files, until the daemon's disk or inodes ran out.
func TestImportBounds(t *testing.T) {
	ctx := context.Background()
	small := mkTar(t, tarEntry{name: "etc/", typ: tar.TypeDir}, tarEntry{name: "etc/ok", body: "fits\n"})
	bomb := zeros(t, 8<<20)
	bombImage := testImage(t, v1.Config{}, bomb)
	for _, c := range []struct {
		name    string
		bounds  Bounds
		archive []byte
		path    bool // through ImportPath (a file), not Import (a stream)
		want    string
	}{
		{"files in a layer", Bounds{Files: 20}, dockerSave(t, testImage(t, v1.Config{}, mkTar(t, manyFiles(50)...))),
			false, "image layers (together): more than 20 files, the limit of this daemon (--max-image-files)"},
		{"files across layers", Bounds{Files: 20}, dockerSave(t, testImage(t, v1.Config{}, mkTar(t, manyFiles(15)...), mkTar(t, manyFiles(15)...))),
			false, "more than 20 files"},
		{"gzip bomb in a layer", Bounds{ExpandedBytes: 1 << 20}, dockerSave(t, bombImage),
			false, "image layers (together): more than 1 MiB expanded, the limit of this daemon (--max-image-expanded-mb)"},
		{"bomb in the second layer", Bounds{ExpandedBytes: 1 << 20}, dockerSave(t, testImage(t, v1.Config{}, small, bomb)),
			false, "layer 2/2"},
		{"gzip bomb around the archive", Bounds{ExpandedBytes: 1 << 20}, gzipBytes(t, dockerArchive(t, [][]byte{bomb}, []string{diffID(bomb)}, nil)),
			false, "image archive: more than 1 MiB expanded"},
		{"bomb in an OCI layout", Bounds{ExpandedBytes: 1 << 20}, tarDir(t, ociLayout(t, map[v1.Image][]layout.Option{bombImage: nil})),
			false, "more than 1 MiB expanded"},
		{"files in an OCI layout", Bounds{Files: 3}, tarDir(t, ociLayout(t, map[v1.Image][]layout.Option{bombImage: nil})),
			false, "OCI layout archive: more than 3 files"},
		{"archive file", Bounds{ArchiveBytes: 1 << 20}, dockerSave(t, testImage(t, v1.Config{}, mkTar(t, tarEntry{name: "noise", body: noise(2 << 20)}))),
			true, "image archive: more than 1 MiB as sent, the limit of this daemon (--max-image-archive-mb)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openStore(t)
			s.SetBounds(c.bounds)
			// A layer the store already has, which an image uses, stays.
			if _, err := s.Import(ctx, "existing", bytes.NewReader(dockerSave(t, testImage(t, v1.Config{}, small))), nil, nil); err != nil {
				t.Fatal(err)
			}
			before := storeFiles(t, s)
			var err error
			if c.path {
				p := filepath.Join(t.TempDir(), "archive.tar")
				if err := os.WriteFile(p, c.archive, 0o644); err != nil {
					t.Fatal(err)
				}
				_, err = s.ImportPath(ctx, "img", p, nil, nil)
			} else {
				_, err = s.Import(ctx, "img", bytes.NewReader(c.archive), nil, nil)
			}
			if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want too_large with %q", err, c.want)
			}
			if after := storeFiles(t, s); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Fatalf("the failed import left files behind:\nbefore %v\nafter  %v", before, after)
			}
			if _, err := s.Get(ctx, "img"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("image registered: %v", err)
			}
			// The same archive imports under the default bounds.
			s.SetBounds(Bounds{})
			if c.path {
				return
			}
			if _, err := s.Import(ctx, "img", bytes.NewReader(c.archive), nil, nil); err != nil {
				t.Fatalf("within the default bounds: %v", err)
			}
		})
	}
}

// A new layer an import committed before it failed goes with it; one that
// another image uses stays.
func TestFailedImportDropsItsLayers(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	shared := mkTar(t, tarEntry{name: "shared", body: "used by another image\n"})
	fresh := mkTar(t, tarEntry{name: "fresh", body: "only this import's\n"})
	if _, err := s.Import(ctx, "other", bytes.NewReader(dockerSave(t, testImage(t, v1.Config{}, shared))), nil, nil); err != nil {
		t.Fatal(err)
	}
	s.SetBounds(Bounds{ExpandedBytes: 1 << 20})
	_, err := s.Import(ctx, "img", bytes.NewReader(dockerSave(t, testImage(t, v1.Config{}, shared, fresh, zeros(t, 4<<20)))), nil, nil)
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "layer 3/3") {
		t.Fatalf("import: %v", err)
	}
	ents, err := os.ReadDir(filepath.Join(s.Dir(), layersDir))
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Get(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != other.Layers[0] {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("layers left: %v, want only %s", names, other.Layers[0])
	}
}

// A file whose header says it would go over the bound is refused before a
// byte of it is written, and a budget spans several archives.
func TestExtractTarBudget(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := NewBudget(Bounds{ExpandedBytes: 64 << 10, Files: 10}, "test content")
	if err := ExtractTar(ctx, bytes.NewReader(mkTar(t, tarEntry{name: "a", body: strings.Repeat("a", 30<<10)})), dir, ExtractOptions{Budget: b}); err != nil {
		t.Fatal(err)
	}
	err := ExtractTar(ctx, bytes.NewReader(mkTar(t, tarEntry{name: "b", body: strings.Repeat("b", 40<<10)})), dir, ExtractOptions{Budget: b})
	if !errors.Is(err, errdefs.ErrTooLarge) || err.Error() != "test content: more than 65536 bytes expanded, the limit of this daemon (--max-image-expanded-mb)" {
		t.Fatalf("second archive: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused file was written: %v", err)
	}
	err = ExtractTar(ctx, bytes.NewReader(mkTar(t, manyFiles(20)...)), t.TempDir(), ExtractOptions{Budget: b})
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "test content: more than 10 files") {
		t.Fatalf("files: %v", err)
	}
	// Gzipped, the bound applies to what it expands to.
	err = ExtractTar(ctx, bytes.NewReader(gzipBytes(t, zeros(t, 1<<20))), t.TempDir(), ExtractOptions{Budget: NewBudget(Bounds{ExpandedBytes: 512 << 10}, "ctx")})
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("gzipped: %v", err)
	}
}

func TestLimitArchive(t *testing.T) {
	data := strings.Repeat("x", 1000)
	got, err := io.ReadAll(LimitArchive(strings.NewReader(data), "upload", 1000))
	if err != nil || len(got) != 1000 {
		t.Fatalf("exactly the limit: %d %v", len(got), err)
	}
	_, err = io.ReadAll(LimitArchive(strings.NewReader(data+"y"), "upload", 1000))
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "upload: more than 1000 bytes as sent") {
		t.Fatalf("one byte over: %v", err)
	}
}
