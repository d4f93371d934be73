package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/diskspace/diskspacetest"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// noiseLayer is a layer tar holding n random bytes (which no compression
// makes smaller).
func noiseLayer(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	return mkTar(t, tarEntry{name: "noise", body: string(b)})
}

// storeLeftovers lists what a failed import or commit could leave in s:
// temporary entries and layers.
func storeLeftovers(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	ents, _ := os.ReadDir(s.Dir())
	for _, e := range ents {
		if e.Name() != ".lock" && e.Name() != layersDir {
			out = append(out, e.Name())
		}
	}
	layers, _ := os.ReadDir(filepath.Join(s.Dir(), layersDir))
	for _, e := range layers {
		out = append(out, layersDir+"/"+e.Name())
	}
	return out
}

// TestImportOnAFullDisk: an import whose spool does not fit, and one whose
// layers do not fit after the spool, are 507 naming the images dir's
// filesystem and the sizes, and leave nothing in the store.
func TestImportOnAFullDisk(t *testing.T) {
	ctx := context.Background()
	layer := noiseLayer(t, 3<<20)
	archive := dockerSave(t, testImage(t, v1.Config{}, layer))
	for _, tc := range []struct {
		name string
		size int64 // of the images dir's filesystem
		want string
	}{
		// The spool meets ENOSPC midway.
		{"spool", 2 << 20, `the disk filled up while writing the archive of image "big" (spooled before its import): it needs more than `},
		// The spool fits; the layers, about as big, do not: refused up front.
		{"layers", 5 << 20, `not enough disk space for the layers of image "big": it needs about 3.0 MiB, and the filesystem at `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsDir := diskspacetest.TmpFS(t, tc.size)
			s, err := Open(filepath.Join(fsDir, "images"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Import(ctx, "big", bytes.NewReader(archive), nil, nil)
			var e *diskspace.Error
			if !errors.As(err, &e) || !errors.Is(err, errdefs.ErrInsufficientStorage) || e.Room.Mount != fsDir || e.Room.Path != s.Dir() {
				t.Fatalf("import: %#v", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "(tmpfs), which holds "+s.Dir()+", ") {
				t.Fatalf("import: %v\nwant it to say %q", err, tc.want)
			}
			if left := storeLeftovers(t, s); len(left) != 0 {
				t.Fatalf("left in the store: %v", left)
			}
		})
	}
}

// TestCommitLayerOnAFullDisk: a layer whose files fill the disk is 507
// naming the layer, the filesystem and what had been written, and no half
// layer stays.
func TestCommitLayerOnAFullDisk(t *testing.T) {
	fsDir := diskspacetest.TmpFS(t, 2<<20)
	s, err := Open(filepath.Join(fsDir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	l := &Layer{ID: ChainID("", "full"), CreatedBy: "run: make a big file"}
	err = s.CommitLayer(context.Background(), l, func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "big"), make([]byte, 3<<20), 0o644)
	})
	var e *diskspace.Error
	if !errors.As(err, &e) || !e.Midway || !e.AtLeast || e.Need <= 0 || e.Room.Path != filepath.Join(s.Dir(), layersDir) {
		t.Fatalf("commit: %#v", err)
	}
	if !strings.Contains(err.Error(), "the disk filled up while writing layer "+l.ID[:12]+" (run: make a big file): it needs more than ") {
		t.Fatalf("commit: %v", err)
	}
	if left := storeLeftovers(t, s); len(left) != 0 {
		t.Fatalf("left in the store: %v", left)
	}
	if s.HasLayer(l.ID) {
		t.Fatal("the layer is committed")
	}
}
