package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

func commitOne(t *testing.T, s *Store, id string) string {
	t.Helper()
	p, err := s.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(p.Dir(), "criu"), 0o700)
	os.WriteFile(filepath.Join(p.Dir(), "fs.tar"), []byte("filesystem bytes"), 0o600)
	os.WriteFile(filepath.Join(p.Dir(), "criu", "pages-1.img"), []byte("memory pages"), 0o600)
	_, sum, err := p.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// hashedBy reports how many files fn hashed.
func hashedBy(fn func()) int64 {
	before := filesHashed.Load()
	fn()
	return filesHashed.Load() - before
}

// A snapshot this process committed or hashed is trusted while its files
// are unchanged; a restarted process hashes it again; a wrong checksum is
// never trusted.
func TestVerifyTrustsAnUnchangedSnapshot(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := commitOne(t, s, "snap_a")
	if n := hashedBy(func() {
		if err := s.Verify("snap_a", sum); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Verify right after Commit hashed %d files, want 0", n)
	}
	if err := s.Verify("snap_a", "0000"+sum[4:]); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("a wrong checksum: %v", err)
	}
	// A new Store (a daemon restart) hashes before its first use, then
	// trusts.
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := hashedBy(func() { s2.Verify("snap_a", sum) }); n != 2 {
		t.Fatalf("first Verify after a restart hashed %d files, want 2", n)
	}
	if n := hashedBy(func() { s2.Verify("snap_a", sum) }); n != 0 {
		t.Fatalf("second Verify after a restart hashed %d files, want 0", n)
	}
}

// A file changed after its snapshot was trusted is hashed again and refused,
// even with its size and modification time put back (its change time moves).
func TestVerifyRefusesATamperedTrustedSnapshot(t *testing.T) {
	for _, file := range []string{"fs.tar", "criu/pages-1.img", manifestName} {
		s, err := Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		sum := commitOne(t, s, "snap_a")
		path := filepath.Join(s.Path("snap_a"), filepath.FromSlash(file))
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		b[0] ^= 0xff
		time.Sleep(10 * time.Millisecond) // a later change time
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
		if err := s.Verify("snap_a", sum); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("%s tampered with (size and mtime kept): Verify = %v, want refused", file, err)
		}
	}
}

// An old mark is still trusted, and its snapshot hashed again in the
// background: kept when whole, dropped when not.
func TestOldMarksAreReverified(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sum := commitOne(t, s, "snap_a")
	age := func() {
		s.v.mu.Lock()
		s.v.m["snap_a"].at = time.Now().Add(-2 * reverifyAfter)
		s.v.mu.Unlock()
	}
	age()
	if err := s.Verify("snap_a", sum); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.v.mu.Lock()
		mk, busy := s.v.m["snap_a"], s.v.busy["snap_a"]
		fresh := mk != nil && time.Since(mk.at) < reverifyAfter
		s.v.mu.Unlock()
		if fresh && !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old mark was not renewed by a background re-verification")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A corrupt snapshot loses its mark in the background re-hash (here
	// called directly: its stamps are forged to match, as only an attacker
	// who could set change times could).
	path := filepath.Join(s.Path("snap_a"), "fs.tar")
	os.WriteFile(path, []byte("tampered bytes!!"), 0o600)
	names, _ := manifestNames(s.Path("snap_a"))
	s.v.mu.Lock()
	s.v.m["snap_a"].files = stampAll(s.Path("snap_a"), names)
	s.v.mu.Unlock()
	s.forgetIfCorrupt("snap_a", sum)
	s.v.mu.Lock()
	mk := s.v.m["snap_a"]
	s.v.mu.Unlock()
	if mk != nil {
		t.Fatal("a corrupt snapshot kept its mark")
	}
	if err := s.Verify("snap_a", sum); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Verify of the corrupt snapshot: %v", err)
	}
}
