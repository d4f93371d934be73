package snapshot

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// A snapshot that hard-links a base's file (as memory snapshots share
// pages): Commit takes the file's sum from LinkFile instead of hashing it,
// counts it apart from the snapshot's own bytes, and the base stays
// trusted; Clone keeps the file shared; the linked file is still checked
// (a write to it makes both snapshots refuse); deleting the base leaves the
// child whole.
func TestSharedFiles(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	baseSum := commitOne(t, s, "snap_base")

	p, err := s.Begin("snap_child")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(p.Dir(), "criu", "parent"), 0o755)
	own := []byte("the child's own pages")
	os.WriteFile(filepath.Join(p.Dir(), "criu", "pages-1.img"), own, 0o600)
	to := filepath.Join(p.Dir(), "criu", "parent", "pages-1.img")
	var sum string
	if n := hashedBy(func() {
		sum, err = s.LinkFile("snap_base", baseSum, "criu/pages-1.img", to)
	}); err != nil || n != 0 {
		t.Fatalf("LinkFile of a trusted base: %v, hashed %d files", err, n)
	}
	if err := p.Shared("criu/parent/pages-1.img", sum); err != nil {
		t.Fatal(err)
	}
	var size int64
	var childSum string
	if n := hashedBy(func() { size, childSum, err = p.Commit() }); err != nil || n != 1 {
		t.Fatalf("Commit: %v, hashed %d files, want only the child's own one", err, n)
	}
	var m Manifest
	b, _ := os.ReadFile(filepath.Join(s.Path("snap_child"), manifestName))
	json.Unmarshal(b, &m)
	if m.SizeBytes != int64(len(own)) || m.SharedBytes != int64(len("memory pages")) || !slices.Equal(m.Shared, []string{"criu/parent/pages-1.img"}) {
		t.Fatalf("manifest sizes: %+v", m)
	}
	if size != m.SizeBytes+int64(len(b)) {
		t.Fatalf("Commit's size %d counts shared bytes (own %d + manifest %d)", size, m.SizeBytes, len(b))
	}
	if base, _ := s.Files("snap_base"); m.Files["criu/parent/pages-1.img"] != base["criu/pages-1.img"] {
		t.Fatal("the shared file's sum is not the base file's")
	}
	// The base's mark survived the link: no hashing on its next use.
	if n := hashedBy(func() { err = s.Verify("snap_base", baseSum) }); err != nil || n != 0 {
		t.Fatalf("Verify of the base after the link: %v, hashed %d", err, n)
	}
	if _, err := s.LinkFile("snap_base", baseSum, "criu/nope.img", filepath.Join(t.TempDir(), "x")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("LinkFile of a file the base lacks: %v", err)
	}

	// A clone keeps the file shared.
	csize, _, err := s.Clone("snap_child", childSum, "snap_clone", func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if csize != size {
		t.Fatalf("clone's size %d, the source's %d", csize, size)
	}

	// More links (another child) move the shared inode's change time: the
	// child is still trusted.
	if _, err := s.LinkFile("snap_base", baseSum, "criu/pages-1.img", filepath.Join(s.dir, "extra-link")); err != nil {
		t.Fatal(err)
	}
	if n := hashedBy(func() { err = s.Verify("snap_child", childSum) }); err != nil || n != 0 {
		t.Fatalf("Verify of the child after another link: %v, hashed %d", err, n)
	}

	// A write to the shared file is caught in both.
	time.Sleep(10 * time.Millisecond) // a modification time that differs
	shared := filepath.Join(s.Path("snap_child"), "criu", "parent", "pages-1.img")
	if err := os.WriteFile(shared, []byte("memory PAGES"), 0o600); err != nil {
		t.Fatal(err)
	}
	for id, sum := range map[string]string{"snap_base": baseSum, "snap_child": childSum} {
		if err := s.Verify(id, sum); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("%s with its shared file rewritten: %v", id, err)
		}
	}
	os.WriteFile(shared, []byte("memory pages"), 0o600)

	// Deleting the base leaves the child whole.
	if err := s.Delete("snap_base"); err != nil {
		t.Fatal(err)
	}
	s2, _ := Open(s.dir) // hash in full, as after a restart
	if err := s2.Verify("snap_child", childSum); err != nil {
		t.Fatalf("the child after its base was deleted: %v", err)
	}
}
