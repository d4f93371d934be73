package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// putImage writes an image's metadata as a build would, without a rootfs.
func putImage(t *testing.T, s *Store, name string) *Image {
	t.Helper()
	dir := filepath.Join(s.Dir(), name)
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	img := &Image{
		Name:      name,
		RootFS:    filepath.Join(dir, "rootfs"),
		Binds:     []Bind{{Source: "/usr", Target: "/usr", ReadOnly: true}},
		Env:       []string{"HOME=/home/user"},
		WorkDir:   "/workspace",
		UID:       1000,
		GID:       1000,
		CreatedAt: time.Now().UTC(),
		SizeBytes: 42,
	}
	if err := writeMeta(dir, img); err != nil {
		t.Fatal(err)
	}
	return img
}

func TestGetListNotFound(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	if _, err := s.Get(ctx, "python"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get(missing) = %v, want ErrNotFound", err)
	} else if err.Error() != `image "python" not found` {
		t.Errorf("message = %q", err.Error())
	}
	for _, bad := range []string{"", "..", "../etc", "a/b", "Python", ".tmp-x"} {
		if _, err := s.Get(ctx, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Get(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	if imgs, err := s.List(ctx); err != nil || len(imgs) != 0 {
		t.Fatalf("List(empty) = %v, %v", imgs, err)
	}

	want := putImage(t, s, "zeta")
	putImage(t, s, "alpha")
	// Neither a directory without image.json nor a build in progress is an image.
	for _, d := range []string{"half", tmpPrefix + "python-123"} {
		if err := os.MkdirAll(filepath.Join(s.Dir(), d), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	got, err := s.Get(ctx, "zeta")
	if err != nil {
		t.Fatal(err)
	}
	if got.RootFS != want.RootFS || !got.CreatedAt.Equal(want.CreatedAt) || got.SizeBytes != 42 ||
		len(got.Binds) != 1 || got.Binds[0] != want.Binds[0] || got.UID != 1000 || got.WorkDir != "/workspace" {
		t.Errorf("Get = %+v, want %+v", got, want)
	}
	imgs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 2 || imgs[0].Name != "alpha" || imgs[1].Name != "zeta" {
		t.Fatalf("List = %v, want alpha, zeta", imgs)
	}
}

func TestOpenRemovesLeftoverBuilds(t *testing.T) {
	dir := t.TempDir()
	// A process that is gone: a pid that exited.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("%s%d-python-1", tmpMark, gone.Process.Pid)
	old := tmpMark + "python-1"     // a leftover named before pids were
	live := tmpPrefix + "context-1" // this process's: a build under way
	for _, d := range []string{dead, old, live} {
		if err := os.MkdirAll(filepath.Join(dir, d, "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dead, old} {
		if _, err := os.Stat(filepath.Join(dir, d)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leftover %s still there: %v", d, err)
		}
	}
	// Another process opening the same store (a second daemon, `forkbox
	// prepare`) must not take a build from under a live one.
	if _, err := os.Stat(filepath.Join(dir, live, "rootfs")); err != nil {
		t.Fatalf("a live process's build was removed: %v", err)
	}
}

func TestCorruptMetadata(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s.Dir(), "broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), "broken", metaFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(context.Background(), "broken")
	if err == nil || errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get(corrupt) = %v, want a non-NotFound error", err)
	}
}

func TestCheckPythonSaysHowToFix(t *testing.T) {
	ctx := context.Background()
	err := checkPython(ctx, "/nonexistent/python3", "import os")
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "make setup") {
		t.Errorf("missing interpreter: %v", err)
	}
	if _, statErr := os.Stat(hostPython); statErr != nil {
		t.Skipf("no %s on this host", hostPython)
	}
	err = checkPython(ctx, hostPython, "import forkbox_no_such_module")
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "make setup") ||
		!strings.Contains(err.Error(), "No module named 'forkbox_no_such_module'") {
		t.Errorf("missing module: %v", err)
	}
	t.Log(err)
}

// TestGCKeepsYoungLayers: a layer no image names yet (a build in progress,
// maybe in another daemon sharing the store) survives gc for the grace time.
func TestGCKeepsYoungLayers(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	young := &Layer{ID: ChainID("", "young")}
	if err := s.CommitLayer(ctx, young, func(string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	unlock, err := s.lock()
	if err != nil {
		t.Fatal(err)
	}
	err = s.gcLocked(ctx)
	unlock()
	if err != nil || !s.HasLayer(young.ID) {
		t.Fatalf("gc removed a young layer: %v", err)
	}
	s.gcGrace = 0
	unlock, _ = s.lock()
	err = s.gcLocked(ctx)
	unlock()
	if err != nil || s.HasLayer(young.ID) {
		t.Fatalf("gc kept an unreferenced layer past its grace: %v", err)
	}
}
