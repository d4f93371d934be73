package build

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/runtime"
)

// noRuntime: copy steps need no build sandbox.
type noRuntime struct{}

func (noRuntime) Create(context.Context, runtime.Spec) (*runtime.Info, error) {
	return nil, errors.New("no runtime in this test")
}
func (noRuntime) Destroy(context.Context, string, *runtime.Info) error { return nil }
func (noRuntime) CaptureLayer(context.Context, string, string) error   { return nil }

// storeWithBase is an image store holding a one-layer image "base".
func storeWithBase(t *testing.T) *image.Store {
	t.Helper()
	ctx := context.Background()
	s, err := image.Open(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	l := &image.Layer{ID: image.ChainID("", "bounds-test-base"), CreatedBy: "test"}
	if err := s.CommitLayer(ctx, l, func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "base.txt"), []byte("base\n"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Register(ctx, &image.Image{Name: "base", Layers: []string{l.ID}, WorkDir: "/", UID: 1000, GID: 1000}, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

// contextTar is a build context of files name → size bytes (zeros).
func contextTar(t *testing.T, gz bool, files map[string]int) []byte {
	t.Helper()
	var buf bytes.Buffer
	var zw *gzip.Writer
	tw := tar.NewWriter(&buf)
	if gz {
		zw = gzip.NewWriter(&buf)
		tw = tar.NewWriter(zw)
	}
	for name, size := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// leftovers lists the temporary files and directories under dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".tmp-") {
			out = append(out, p)
		}
		return err
	})
	return out
}

// On the old main a build context (bounded only as sent, 1 GiB) expanded
// without bound, and copy steps could copy it again and again.
func TestBuildBounds(t *testing.T) {
	ctx := context.Background()
	copyTo := func(dests ...string) []api.RecipeStep {
		var steps []api.RecipeStep
		for _, d := range dests {
			steps = append(steps, api.RecipeStep{Copy: &api.CopyStep{Src: "data", Dest: d}})
		}
		return steps
	}
	many := map[string]int{}
	for i := 0; i < 30; i++ {
		many[fmt.Sprintf("data/f%d", i)] = 1
	}
	for _, c := range []struct {
		name    string
		bounds  image.Bounds
		context []byte
		steps   []api.RecipeStep
		want    string
	}{
		{"context files", image.Bounds{Files: 10}, contextTar(t, false, many), copyTo("/a"),
			"build context: more than 10 files, the limit of this daemon (--max-image-files)"},
		{"context gzip bomb", image.Bounds{ExpandedBytes: 1 << 20}, contextTar(t, true, map[string]int{"data": 4 << 20}), copyTo("/a"),
			"build context: more than 1 MiB expanded, the limit of this daemon (--max-image-expanded-mb)"},
		{"copy steps together", image.Bounds{ExpandedBytes: 1 << 20}, contextTar(t, true, map[string]int{"data": 600 << 10}), copyTo("/a", "/b"),
			"step 2/2 (copy): copy steps (together): more than 1 MiB expanded"},
		{"copy steps files", image.Bounds{Files: 40}, contextTar(t, false, many), copyTo("/a", "/b"),
			"step 2/2 (copy): copy steps (together): more than 40 files"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := storeWithBase(t)
			s.SetBounds(c.bounds)
			b := New(s, noRuntime{}, Config{})
			r := &api.Recipe{Name: "img", Base: "base", Steps: c.steps}
			_, err := b.Build(ctx, r, bytes.NewReader(c.context), nil, nil)
			if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want too_large with %q", err, c.want)
			}
			if left := leftovers(t, s.Dir()); len(left) > 0 {
				t.Fatalf("left behind: %v", left)
			}
			if _, err := s.Get(ctx, "img"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("image registered: %v", err)
			}
			// Within the default bounds the same build works.
			s.SetBounds(image.Bounds{})
			if _, err := b.Build(ctx, r, bytes.NewReader(c.context), nil, nil); err != nil {
				t.Fatalf("default bounds: %v", err)
			}
		})
	}
}
