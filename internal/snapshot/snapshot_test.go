package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestCommitVerifyCorruptDelete(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Begin("snap_a")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(p.Dir(), "criu"), 0o700)
	os.WriteFile(filepath.Join(p.Dir(), "fs.tar"), []byte("filesystem bytes"), 0o600)
	os.WriteFile(filepath.Join(p.Dir(), "criu", "pages-1.img"), []byte("memory pages"), 0o600)
	// Not visible before commit.
	if ids, _ := s.IDs(); len(ids) != 0 {
		t.Fatalf("pending snapshot listed: %v", ids)
	}
	size, sum, err := p.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if size < int64(len("filesystem bytes")+len("memory pages")) || len(sum) != 64 {
		t.Fatalf("commit: size %d sum %q", size, sum)
	}
	if ids, _ := s.IDs(); len(ids) != 1 || ids[0] != "snap_a" {
		t.Fatalf("ids %v", ids)
	}
	if err := s.Verify("snap_a", sum); err != nil {
		t.Fatal(err)
	}
	// Flip one byte of the memory image.
	f := filepath.Join(s.Path("snap_a"), "criu", "pages-1.img")
	b, _ := os.ReadFile(f)
	b[0] ^= 0xff
	os.WriteFile(f, b, 0o600)
	err = s.Verify("snap_a", sum)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "snap_a") || !strings.Contains(err.Error(), "pages-1.img") {
		t.Fatalf("corrupt snapshot: %v", err)
	}
	// A tampered manifest is caught by the recorded checksum.
	os.WriteFile(filepath.Join(s.Path("snap_a"), manifestName), []byte(`{"files":{}}`), 0o600)
	if err := s.Verify("snap_a", sum); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("tampered manifest: %v", err)
	}
	if err := s.Delete("snap_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path("snap_a")); !os.IsNotExist(err) {
		t.Fatal("delete left files")
	}
}

func TestOpenRemovesUnfinished(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	p, _ := s.Begin("snap_b")
	os.WriteFile(filepath.Join(p.Dir(), "fs.tar"), []byte("half"), 0o600)
	// The daemon dies here; the next start cleans up.
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Dir()); !os.IsNotExist(err) {
		t.Fatal("unfinished snapshot survived Open")
	}
	if _, err := s.Begin("../x"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad id: %v", err)
	}
}

func TestCloneSharesFilesAndOutlivesItsSource(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Begin("snap_src")
	os.MkdirAll(filepath.Join(p.Dir(), "criu"), 0o700)
	os.WriteFile(filepath.Join(p.Dir(), "fs.tar"), []byte("filesystem bytes"), 0o600)
	os.WriteFile(filepath.Join(p.Dir(), "criu", "pages-1.img"), []byte("memory pages"), 0o600)
	_, sum, err := p.Commit()
	if err != nil {
		t.Fatal(err)
	}
	// A whole copy and a filesystem-only one.
	allSize, allSum, err := s.Clone("snap_src", sum, "snap_all", func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	_, fsSum, err := s.Clone("snap_src", sum, "snap_fs", func(rel string) bool { return rel == "fs.tar" })
	if err != nil {
		t.Fatal(err)
	}
	if allSize < int64(len("filesystem bytes")+len("memory pages")) {
		t.Fatalf("clone size %d", allSize)
	}
	if _, err := os.Stat(filepath.Join(s.Path("snap_fs"), "criu")); !os.IsNotExist(err) {
		t.Fatalf("filesystem clone has the memory image: %v", err)
	}
	// The source goes away; the clones stay whole.
	if err := s.Delete("snap_src"); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify("snap_all", allSum); err != nil {
		t.Fatalf("whole clone after its source was deleted: %v", err)
	}
	if err := s.Verify("snap_fs", fsSum); err != nil {
		t.Fatalf("filesystem clone: %v", err)
	}
	// Nothing pending is left behind, and an existing id is refused.
	if _, _, err := s.Clone("snap_all", allSum, "snap_fs", func(string) bool { return true }); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("clone onto an existing id: %v", err)
	}
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Fatalf("pending dir left: %s", e.Name())
		}
	}
}

func TestCloneRefusesACorruptSource(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Begin("snap_src")
	os.WriteFile(filepath.Join(p.Dir(), "fs.tar"), []byte("filesystem bytes"), 0o600)
	_, sum, err := p.Commit()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(s.Path("snap_src"), "fs.tar"), []byte("tampered bytes!!"), 0o600)
	if _, _, err := s.Clone("snap_src", sum, "snap_dst", func(string) bool { return true }); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("clone of a corrupt snapshot: %v", err)
	}
	if ids, _ := s.IDs(); len(ids) != 1 {
		t.Fatalf("a refused clone left files: %v", ids)
	}
	if _, _, err := s.Clone("snap_src", sum, "snap_none", func(string) bool { return false }); err == nil {
		t.Fatal("a clone of no files succeeded")
	}
}

func TestIntents(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := s.Intents("fork"); err != nil || len(ids) != 0 {
		t.Fatalf("no marks yet: %v %v", ids, err)
	}
	for _, id := range []string{"snap_a", "snap_b"} {
		if err := s.MarkIntent("fork", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkIntent("fork", "snap_a"); err != nil { // twice is fine
		t.Fatal(err)
	}
	if err := s.MarkIntent("fork", "../x"); err == nil {
		t.Fatal("a mark outside its dir was made")
	}
	if err := s.ClearIntent("fork", "snap_a"); err != nil {
		t.Fatal(err)
	}
	if err := s.ClearIntent("fork", "snap_a"); err != nil { // gone already
		t.Fatal(err)
	}
	ids, err := s.Intents("fork")
	if err != nil || len(ids) != 1 || ids[0] != "snap_b" {
		t.Fatalf("marks: %v %v; want [snap_b]", ids, err)
	}
	// Marks are not snapshots.
	if got, err := s.IDs(); err != nil || len(got) != 0 {
		t.Fatalf("IDs with only marks: %v %v", got, err)
	}
}
