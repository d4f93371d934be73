package userns

import (
	"errors"
	"os"
	"testing"

	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestAllocReserveSweep(t *testing.T) {
	a, err := New(DefaultFirst, 3, t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b0, err := a.Alloc()
	if err != nil || b0 != DefaultFirst {
		t.Fatalf("first alloc %d %v", b0, err)
	}
	// A record names the second range: Alloc skips it.
	if err := a.Reserve(DefaultFirst + Size); err != nil {
		t.Fatal(err)
	}
	b2, err := a.Alloc()
	if err != nil || b2 != DefaultFirst+2*Size {
		t.Fatalf("alloc past a reserved range: %d %v", b2, err)
	}
	if _, err := a.Alloc(); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("alloc of a full pool: %v", err)
	}
	// Pinned ranges survive a sweep that finds no record of them; the
	// reserved one goes once nothing references it.
	if n := a.Sweep(map[uint32]bool{}); n != 1 {
		t.Fatalf("sweep freed %d, want 1 (the unpinned reserved range)", n)
	}
	a.Unpin(b0)
	if n := a.Sweep(map[uint32]bool{b2: true}); n != 1 || a.InUse() != 1 {
		t.Fatalf("sweep after unpin: freed %d, %d in use", n, a.InUse())
	}
	if b, err := a.Alloc(); err != nil || b != DefaultFirst {
		t.Fatalf("a freed range is handed out again: %d %v", b, err)
	}
}

func TestValidAndReserveRefusesForeignBases(t *testing.T) {
	a, err := New(DefaultFirst, 2, t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []uint32{0, 1000, DefaultFirst + 1, DefaultFirst + 2*Size} {
		if a.Valid(b) || a.Reserve(b) == nil {
			t.Errorf("base %d accepted", b)
		}
	}
	if !a.Valid(DefaultFirst + Size) {
		t.Error("second range refused")
	}
}

func TestNewRefusesHostIDs(t *testing.T) {
	// uid 0 is root's on every host.
	if _, err := New(0, 1, t.TempDir(), t.TempDir()); err == nil {
		t.Fatal("a pool over uid 0 was accepted")
	}
	if _, err := New(1<<32-Size, 2, t.TempDir(), t.TempDir()); err == nil {
		t.Fatal("a pool past the last id was accepted")
	}
}

func TestClaimsKeepDaemonsApart(t *testing.T) {
	claims := t.TempDir()
	dirA, dirB := t.TempDir(), t.TempDir()
	a, err := New(DefaultFirst, 2, claims, dirA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(DefaultFirst, 2, claims, dirB)
	if err != nil {
		t.Fatal(err)
	}
	ra, err := a.Alloc()
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Alloc()
	if err != nil || rb == ra {
		t.Fatalf("two daemons got range %d and %d (%v)", ra, rb, err)
	}
	if _, err := b.Alloc(); err == nil {
		t.Fatal("a third range out of two")
	}
	if err := b.Reserve(ra); err == nil {
		t.Fatal("b reserved a's range")
	}
	if !a.Owns(ra) || a.Owns(rb) || b.Owns(ra) || !b.Owns(rb) {
		t.Fatalf("owners: a owns %d %v, %d %v; b owns %d %v, %d %v", ra, a.Owns(ra), rb, a.Owns(rb), ra, b.Owns(ra), rb, b.Owns(rb))
	}
	// a's data dir goes away (a test's temp dir): its claim is stale.
	os.RemoveAll(dirA)
	if r, err := b.Alloc(); err != nil || r != ra {
		t.Fatalf("stale claim not taken over: %d %v", r, err)
	}
	// Sweeping gives claims back.
	b.Unpin(ra)
	b.Unpin(rb)
	if n := b.Sweep(nil); n != 2 {
		t.Fatalf("swept %d", n)
	}
	if ents, _ := os.ReadDir(claims); len(ents) != 0 {
		t.Fatalf("claims left: %v", ents)
	}
}

// TestAllocNextFit: Alloc goes on from the range it last handed out, so that
// ranges other daemons hold are checked once per lap, not on every create;
// a freed range comes round again when the cursor wraps.
func TestAllocNextFit(t *testing.T) {
	claims := t.TempDir()
	other, err := New(DefaultFirst, 4, claims, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	held, err := other.Alloc() // another live daemon's claim on range 0
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(DefaultFirst, 4, claims, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r1, err := a.Alloc()
	if err != nil || r1 != held+Size {
		t.Fatalf("first alloc %d %v, want %d (past the other daemon's)", r1, err, held+Size)
	}
	a.Unpin(r1)
	a.Sweep(nil)
	r2, err := a.Alloc()
	if err != nil || r2 != r1+Size {
		t.Fatalf("after freeing %d: got %d %v, want the next one %d", r1, r2, err, r1+Size)
	}
	r3, _ := a.Alloc()
	// The cursor wraps past the other daemon's range to the freed one.
	if r4, err := a.Alloc(); err != nil || r4 != r1 {
		t.Fatalf("after %d, %d: got %d %v, want the freed %d", r2, r3, r4, err, r1)
	}
}
