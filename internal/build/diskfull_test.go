package build

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/diskspace/diskspacetest"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
)

// storeOn is storeWithBase on a tmpfs of size bytes.
func storeOn(t *testing.T, size int64) (*image.Store, string) {
	t.Helper()
	fsDir := diskspacetest.TmpFS(t, size)
	s, err := image.Open(filepath.Join(fsDir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	l := &image.Layer{ID: image.ChainID("", "diskfull-test-base"), CreatedBy: "test"}
	ctx := context.Background()
	if err := s.CommitLayer(ctx, l, func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "base.txt"), []byte("base\n"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Register(ctx, &image.Image{Name: "base", Layers: []string{l.ID}, WorkDir: "/", UID: 1000, GID: 1000}, nil); err != nil {
		t.Fatal(err)
	}
	return s, fsDir
}

// TestBuildOnAFullDisk: a copy step whose files do not fit in the images
// dir is refused before it copies, and a build context that fills the disk
// while it is unpacked is 507 too; both name the filesystem and leave
// nothing behind.
func TestBuildOnAFullDisk(t *testing.T) {
	ctx := context.Background()
	buildCtx := contextTar(t, false, map[string]int{"data": 3 << 20})
	r := &api.Recipe{Name: "img", Base: "base", Steps: []api.RecipeStep{{Copy: &api.CopyStep{Src: "data", Dest: "/data"}}}}

	t.Run("copy step", func(t *testing.T) {
		s, fsDir := storeOn(t, 2<<20)
		b := New(s, noRuntime{}, Config{TempDir: t.TempDir()}) // the context fits elsewhere
		_, err := b.Build(ctx, r, bytes.NewReader(buildCtx), nil, nil)
		var e *diskspace.Error
		if !errors.As(err, &e) || e.Midway || e.Room.Mount != fsDir || !errors.Is(err, errdefs.ErrInsufficientStorage) ||
			!strings.Contains(err.Error(), "not enough disk space for the layer of step 1/1 (copy): it needs about 3.0 MiB, and the filesystem at "+fsDir) {
			t.Fatalf("build: %v", err)
		}
		if left := leftovers(t, s.Dir()); len(left) > 0 {
			t.Fatalf("left behind: %v", left)
		}
	})

	t.Run("context", func(t *testing.T) {
		s, fsDir := storeOn(t, 2<<20)
		b := New(s, noRuntime{}, Config{})
		_, err := b.Build(ctx, r, bytes.NewReader(buildCtx), nil, nil)
		var e *diskspace.Error
		if !errors.As(err, &e) || !e.Midway || e.Room.Mount != fsDir || e.Room.Path != s.Dir() ||
			!strings.Contains(err.Error(), "the disk filled up while writing the build context: it needs more than ") {
			t.Fatalf("build: %v", err)
		}
		if left := leftovers(t, s.Dir()); len(left) > 0 {
			t.Fatalf("left behind: %v", left)
		}
		if _, err := s.Get(ctx, "img"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("image registered: %v", err)
		}
	})
}
