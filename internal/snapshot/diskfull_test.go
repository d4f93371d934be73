package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/diskspace/diskspacetest"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// TestCheckRoom: a snapshot estimated larger than the store's filesystem
// has free is refused up front, naming the store's dir and both sizes.
func TestCheckRoom(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckRoom("a memory snapshot of sandbox sbx_1", 4096); err != nil {
		t.Fatalf("4 KiB does not fit: %v", err)
	}
	err = s.CheckRoom("a memory snapshot of sandbox sbx_1", 1<<60)
	if !errors.Is(err, errdefs.ErrInsufficientStorage) {
		t.Fatalf("an exbibyte fits: %v", err)
	}
	for _, want := range []string{"a memory snapshot of sandbox sbx_1", "it needs about 1.0 EiB", s.Dir(), " free of "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}

// TestCommitAndCloneOnAFullDisk: a commit and a clone that meet ENOSPC
// answer 507 naming the filesystem, and leave nothing in the store once
// the pending snapshot is aborted (a clone removes its own).
func TestCommitAndCloneOnAFullDisk(t *testing.T) {
	fsDir := diskspacetest.TmpFS(t, 4<<20)
	dir := filepath.Join(fsDir, "snapshots")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A committed snapshot to clone from, while there is room.
	p, err := s.Begin("snap_src")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(p.Dir(), "fs.tar"), []byte("files"), 0o600)
	_, srcSum, err := p.Commit()
	if err != nil {
		t.Fatal(err)
	}

	p, err = s.Begin("snap_full")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.Dir(), "fs.tar"), []byte("the sandbox's files"), 0o600); err != nil {
		t.Fatal(err)
	}
	diskspacetest.Fill(t, filepath.Join(fsDir, "filler"), 0)
	_, _, err = p.Commit()
	var e *diskspace.Error
	if !errors.As(err, &e) || !e.Midway || e.Room.Mount != fsDir || e.Room.Path != dir {
		t.Fatalf("commit on a full disk: %#v", err)
	}
	if !strings.Contains(err.Error(), "the disk filled up while writing snapshot snap_full: the filesystem at "+fsDir+" (tmpfs), which holds "+dir+", had ") {
		t.Fatalf("message: %v", err)
	}
	if err := p.Abort(); err != nil {
		t.Fatal(err)
	}

	// Again (Fill replaces the filler): what the aborted one freed.
	remove := diskspacetest.Fill(t, filepath.Join(fsDir, "filler"), 0)
	_, _, err = s.Clone("snap_src", srcSum, "snap_clone", func(string) bool { return true })
	if !errors.Is(err, errdefs.ErrInsufficientStorage) || !strings.Contains(err.Error(), "snapshot snap_clone (from snap_src)") {
		t.Fatalf("clone on a full disk: %v", err)
	}
	remove()
	ids, _ := s.IDs()
	ents, _ := os.ReadDir(dir)
	if len(ids) != 1 || len(ents) != 1 {
		t.Fatalf("left in the store: %v", ents)
	}
	// With room again, both work.
	if _, _, err := s.Clone("snap_src", srcSum, "snap_clone", func(string) bool { return true }); err != nil {
		t.Fatalf("clone with room: %v", err)
	}
}
