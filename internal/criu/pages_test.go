package criu

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// memory is a process's private memory as a dump describes it: page
// contents by address.
type memory map[uint64][]byte

// writeDump writes mem as CRIU's pagemap-<pid>.img and pages-<pagesID>.img
// in dir, one present entry per run of consecutive addresses (lazy too
// from 0x7f0000000000 on).
func writeDump(t *testing.T, dir string, pid int, pagesID uint32, mem memory) {
	t.Helper()
	ps := uint64(os.Getpagesize())
	addrs := sortedAddrs(mem)
	var ents []pmEntry
	var pages bytes.Buffer
	for _, a := range addrs {
		flags := uint32(pePRESENT)
		if a >= 0x7f0000000000 { // as CRIU flags anonymous memory
			flags |= peLAZY
		}
		if n := len(ents); n > 0 && ents[n-1].vaddr+ents[n-1].n*ps == a && ents[n-1].flags == flags {
			ents[n-1].n++
		} else {
			ents = append(ents, pmEntry{vaddr: a, n: 1, flags: flags})
		}
		pages.Write(mem[a])
	}
	if err := writePagemap(filepath.Join(dir, fmt.Sprintf("pagemap-%d.img", pid)), pagesID, ents, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("pages-%d.img", pagesID)), pages.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sortedAddrs(mem memory) []uint64 {
	addrs := make([]uint64, 0, len(mem))
	for a := range mem {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	return addrs
}

// readDump reads pid's memory from dir the way CRIU's restore does: present
// pages from the pages file in order, in-parent pages from dir/parent.
func readDump(t *testing.T, dir string, pid int) memory {
	t.Helper()
	ps := uint64(os.Getpagesize())
	name := fmt.Sprintf("pagemap-%d.img", pid)
	pagesID, ents, _, err := readPagemap(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("pages-%d.img", pagesID)))
	if err != nil {
		t.Fatal(err)
	}
	var parent memory
	mem := memory{}
	for _, e := range ents {
		for i := uint64(0); i < e.n; i++ {
			a := e.vaddr + i*ps
			if e.flags&pePARENT != 0 {
				if parent == nil {
					parent = readDump(t, filepath.Join(dir, ParentDir), pid)
				}
				p, ok := parent[a]
				if !ok {
					t.Fatalf("%s: page %#x is in parent, but the parent has none", name, a)
				}
				mem[a] = p
				continue
			}
			mem[a] = raw[(e.off+i)*ps : (e.off+i+1)*ps]
		}
	}
	if uint64(len(raw)) != presentPages(ents)*ps {
		t.Fatalf("%s: pages file holds %d bytes, entries name %d present pages", name, len(raw), presentPages(ents))
	}
	return mem
}

func presentPages(ents []pmEntry) uint64 {
	var n uint64
	for _, e := range ents {
		if e.flags&pePRESENT != 0 {
			n += e.n
		}
	}
	return n
}

func randomPage(r *rand.Rand) []byte {
	p := make([]byte, os.Getpagesize())
	r.Read(p)
	return p
}

func sameMemory(t *testing.T, got, want memory) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("restored %d pages, want %d", len(got), len(want))
	}
	for a, p := range want {
		if !bytes.Equal(got[a], p) {
			t.Fatalf("page %#x differs after dedup", a)
		}
	}
}

func TestDedupPages(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	ps := uint64(os.Getpagesize())
	base, dir := t.TempDir(), t.TempDir()

	// The base: pid 1 with two runs, 200 pages (more than one read chunk);
	// pid 7 the child does not have.
	baseMem := memory{}
	for i := uint64(0); i < 150; i++ {
		baseMem[0x400000+i*ps] = randomPage(r)
	}
	for i := uint64(0); i < 50; i++ {
		baseMem[0x7f0000000000+i*ps] = randomPage(r)
	}
	writeDump(t, base, 1, 3, baseMem)
	writeDump(t, base, 7, 9, memory{0x1000: randomPage(r)})

	// The child: pid 1 changed 5 pages, lost 10 and gained 20 at a new
	// address and 2 at an address next to the base's run; pid 2 is new;
	// shared memory is left alone.
	child := memory{}
	for a, p := range baseMem {
		child[a] = p
	}
	for i := uint64(0); i < 5; i++ {
		child[0x400000+(10+i*20)*ps] = randomPage(r)
	}
	for i := uint64(0); i < 10; i++ {
		delete(child, 0x400000+(100+i)*ps)
	}
	for i := uint64(0); i < 20; i++ {
		child[0x500000+i*ps] = randomPage(r)
	}
	child[0x400000+150*ps] = randomPage(r)
	child[0x400000+151*ps] = baseMem[0x400000] // equal content, other address: not shared
	writeDump(t, dir, 1, 1, child)
	pid2 := memory{0x2000: randomPage(r), 0x3000: baseMem[0x400000]}
	writeDump(t, dir, 2, 2, pid2)
	shmem := []byte("shared memory images stay as they are")
	os.WriteFile(filepath.Join(dir, "pagemap-shmem-5.img"), shmem, 0o644)

	st, err := DedupPages(dir, base, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantShared := int64(150 - 5 - 10 + 50)
	if st.Shared != wantShared || st.Pages != int64(len(child)+len(pid2)) {
		t.Fatalf("stats %+v: want %d of %d pages shared", st, wantShared, len(child)+len(pid2))
	}
	if fmt.Sprint(st.Linked) != "[pagemap-1.img pages-3.img]" {
		t.Fatalf("linked %v", st.Linked)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "pages-1.img")); uint64(fi.Size()) != uint64(len(child)-int(wantShared))*ps {
		t.Fatalf("pages-1.img is %d bytes, want the %d unshared pages", fi.Size(), len(child)-int(wantShared))
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".new-*")); len(leftovers) > 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
	// The base can go: the parent is hard links, not a reference.
	if err := os.RemoveAll(base); err != nil {
		t.Fatal(err)
	}
	sameMemory(t, readDump(t, dir, 1), child)
	sameMemory(t, readDump(t, dir, 2), pid2)
	// Lazy pages stay lazy, in the parent too: a lazy restore serves them
	// on demand, and only them.
	_, ents, _, err := readPagemap(filepath.Join(dir, "pagemap-1.img"))
	if err != nil {
		t.Fatal(err)
	}
	inParent := 0
	for _, e := range ents {
		if lazy := e.vaddr >= 0x7f0000000000; (e.flags&peLAZY != 0) != lazy {
			t.Fatalf("entry at %#x has flags %#x: lazy must be %v", e.vaddr, e.flags, lazy)
		}
		if e.flags&pePARENT != 0 && e.flags&peLAZY != 0 {
			inParent += int(e.n)
		}
	}
	if inParent != 50 {
		t.Fatalf("%d lazy pages in the parent, want 50", inParent)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "pagemap-shmem-5.img")); !bytes.Equal(b, shmem) {
		t.Fatal("shared memory pagemap changed")
	}

	// A deduplicated dump is not a base, and is not deduplicated twice.
	if _, err := DedupPages(t.TempDir(), dir, 0, nil); err == nil {
		t.Fatal("a dump with a parent was accepted as a base")
	}
	if _, err := DedupPages(dir, t.TempDir(), 0, nil); err == nil {
		t.Fatal("a dump with a parent was deduplicated again")
	}
}

func TestDedupPagesNothingShared(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	base, dir := t.TempDir(), t.TempDir()
	writeDump(t, base, 1, 1, memory{0x1000: randomPage(r)})
	writeDump(t, dir, 1, 1, memory{0x1000: randomPage(r), 0x2000: randomPage(r)})
	before, _ := os.ReadFile(filepath.Join(dir, "pages-1.img"))
	st, err := DedupPages(dir, base, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Shared != 0 || st.Pages != 2 || len(st.Linked) != 0 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := os.Stat(filepath.Join(dir, ParentDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("parent dir made with nothing in it: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "pages-1.img")); !bytes.Equal(before, after) {
		t.Fatal("pages rewritten with nothing shared")
	}
}

func TestDedupPagesRefusesBadImages(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	base, dir := t.TempDir(), t.TempDir()
	writeDump(t, base, 1, 1, memory{0x1000: randomPage(r)})
	writeDump(t, dir, 1, 1, memory{0x1000: randomPage(r)})
	pm := filepath.Join(dir, "pagemap-1.img")
	b, _ := os.ReadFile(pm)
	for name, bad := range map[string][]byte{
		"not a pagemap": []byte("garbage!"),
		"truncated":     b[:len(b)-3],
	} {
		os.WriteFile(pm, bad, 0o644)
		if _, err := DedupPages(dir, base, 0, nil); err == nil {
			t.Errorf("%s: accepted", name)
		} else if errors.Is(err, ErrImagesDamaged) {
			t.Errorf("%s: %v claims damage it did not do", name, err)
		}
		if after, _ := os.ReadFile(pm); !bytes.Equal(after, bad) {
			t.Errorf("%s: the image was changed", name)
		}
		if _, err := os.Stat(filepath.Join(dir, ParentDir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: parent dir left behind", name)
		}
	}
}

// A dump that would share less than the fraction asked for stays whole.
func TestDedupPagesMinShared(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	ps := uint64(os.Getpagesize())
	base := t.TempDir()
	baseMem := memory{0x1000: randomPage(r), 0x1000 + ps: randomPage(r)}
	writeDump(t, base, 1, 1, baseMem)
	child := memory{0x1000: baseMem[0x1000], 0x1000 + ps: randomPage(r), 0x9000: randomPage(r), 0xa000: randomPage(r)}
	for _, tc := range []struct {
		min    float64
		shared int64
	}{{0.5, 0}, {0.25, 1}} {
		dir := t.TempDir()
		writeDump(t, dir, 1, 1, child)
		st, err := DedupPages(dir, base, tc.min, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Shared != tc.shared || st.Pages != 4 {
			t.Fatalf("min %.2f: stats %+v, want %d of 4 shared", tc.min, st, tc.shared)
		}
		_, err = os.Stat(filepath.Join(dir, ParentDir))
		if (tc.shared == 0) != errors.Is(err, os.ErrNotExist) {
			t.Fatalf("min %.2f: parent dir: %v", tc.min, err)
		}
		if leftovers, _ := filepath.Glob(filepath.Join(dir, ".new-*")); len(leftovers) > 0 {
			t.Fatalf("min %.2f: temporary files left: %v", tc.min, leftovers)
		}
		sameMemory(t, readDump(t, dir, 1), child)
	}
}
