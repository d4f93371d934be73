package criu

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Page deduplication against a base dump.
//
// CRIU writes a process's private memory as two images: pagemap-<pid>.img,
// a list of (address, number of pages, flags) entries, and pages-<n>.img,
// the pages of the entries flagged present, back to back. An entry flagged
// "in parent" has no bytes there: CRIU's restore reads those pages from the
// images in the directory's "parent" entry, at the same address in the
// same process's pagemap there (CRIU's incremental dumps use this).
//
// DedupPages uses that format after the fact and by content: a page equal,
// byte for byte, to the page at the same address in the base dump's image
// of the same pid is turned into an in-parent reference, and the base's
// pagemap and pages files are hard-linked into dir/parent. Equality is
// checked, not assumed (no soft-dirty tracking, no trust in which process
// the base came from), so any base gives a correct result; a base the
// session descends from gives a small one. The parent is a real directory
// of hard links, not a symlink to the base's directory: the result stands
// alone (deleting the base later loses nothing), CRIU's restored tasks
// read it from inside the images directory they already can read, and the
// chain is never deeper than one level (a base must be a full dump).

// Pagemap entry flags (CRIU's criu/include/pagemap.h).
const (
	pePARENT  = 1 << 0
	peLAZY    = 1 << 1
	pePRESENT = 1 << 2
)

// Image magics (CRIU's criu/include/magic.h): every image but the
// inventory starts with the common magic, then its own.
const (
	magicImgCommon = 0x54564319
	magicPagemap   = 0x56084025
)

// ParentDir is the entry of a CRIU images directory that holds the images
// its in-parent pages are read from.
const ParentDir = "parent"

// ErrImagesDamaged marks a DedupPages error after which the images in dir
// are no longer as CRIU wrote them and must not be restored. Any other
// error leaves them as they were.
var ErrImagesDamaged = errors.New("memory images left half-rewritten")

// DedupStats reports what DedupPages did.
type DedupStats struct {
	// Pages is the number of pages the dump holds; Shared how many of them
	// now refer to the base.
	Pages, Shared int64
	// Linked names the base files hard-linked into dir/parent (their names
	// in the base directory and under parent/ are the same).
	Linked []string
}

// DedupPages rewrites the private-memory images in dir (a CRIU dump) so
// that pages equal to the base dump's at the same address and pid are read
// from base (see above). base must be a full dump: a process whose base
// image has in-parent entries is left whole, as is one the base
// has no image of, or one with nothing in common; and the whole dump is
// left whole when less than minShared (a fraction) of its pages would be
// shared. link hard-links base's file name to path to (nil: os.Link); the
// caller's link may check the base's integrity first. Where a link fails
// the dump is left whole.
func DedupPages(dir, base string, minShared float64, link func(name, to string) error) (DedupStats, error) {
	if link == nil {
		link = func(name, to string) error { return os.Link(filepath.Join(base, name), to) }
	}
	var st DedupStats
	if _, err := os.Lstat(filepath.Join(dir, ParentDir)); err == nil {
		return st, fmt.Errorf("dedup pages: %s already has a parent", dir)
	}
	if _, err := os.Lstat(filepath.Join(base, ParentDir)); err == nil {
		return st, fmt.Errorf("dedup pages: base %s is not a full dump", base)
	}
	names, err := filepath.Glob(filepath.Join(dir, "pagemap-*.img"))
	if err != nil {
		return st, err
	}
	parent := filepath.Join(dir, ParentDir)
	var done []rewritten
	clean := func() {
		for _, r := range done {
			os.Remove(r.newMap)
			os.Remove(r.newPages)
		}
		os.RemoveAll(parent)
	}
	for _, path := range names {
		name := filepath.Base(path)
		if strings.HasPrefix(name, "pagemap-shmem-") {
			continue // shared memory keeps its own images
		}
		r, pages, shared, err := dedupOne(dir, base, parent, name, link)
		if err != nil {
			clean()
			return DedupStats{}, err
		}
		st.Pages += pages
		if r == nil {
			continue
		}
		st.Shared += shared
		done = append(done, *r)
		st.Linked = append(st.Linked, name, r.basePages)
	}
	if float64(st.Shared) < minShared*float64(st.Pages) {
		clean()
		return DedupStats{Pages: st.Pages}, nil
	}
	// Everything is written; now replace, pages files first. A failure
	// here leaves a mix CRIU cannot restore.
	for _, r := range done {
		if err := os.Rename(r.newPages, r.pages); err != nil {
			return st, fmt.Errorf("%w: %w", ErrImagesDamaged, err)
		}
		if err := os.Rename(r.newMap, r.pagemap); err != nil {
			return st, fmt.Errorf("%w: %w", ErrImagesDamaged, err)
		}
	}
	return st, nil
}

// rewritten is one process's images written anew, not yet in place.
type rewritten struct {
	pagemap, pages, newMap, newPages string
	basePages                        string // the base's pages file name
}

type pmEntry struct {
	vaddr uint64
	n     uint64
	off   uint64 // in pages, into the pages file (present entries)
	flags uint32
}

// The pagemap image's messages (CRIU's images/pagemap.proto), by field
// number: pagemap_head {1: pages_id}; pagemap_entry {1: vaddr, 2:
// compat_nr_pages, 3: in_parent, 4: flags, 5: nr_pages}. CRIU 4 writes the
// page count in nr_pages and 0 in the required compat_nr_pages; older
// images have only the latter. Encoded here with protowire: the generated
// types in go-criu predate nr_pages.
const (
	fieldVaddr         = 1
	fieldCompatNrPages = 2
	fieldInParent      = 3
	fieldFlags         = 4
	fieldNrPages       = 5
)

// readPagemap reads a pagemap image: its pages file id and entries. full
// reports whether every entry's pages are in the pages file (none in a
// parent). CRIU flags anonymous memory lazy too (it could be restored on
// demand); such pages are still in the file.
func readPagemap(path string) (pagesID uint32, ents []pmEntry, full bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, false, err
	}
	if len(b) < 8 || binary.LittleEndian.Uint32(b) != magicImgCommon || binary.LittleEndian.Uint32(b[4:]) != magicPagemap {
		return 0, nil, false, fmt.Errorf("%s: not a pagemap image", path)
	}
	b = b[8:]
	first := true
	full = true
	var off uint64
	for len(b) > 0 {
		if len(b) < 4 {
			return 0, nil, false, fmt.Errorf("%s: truncated", path)
		}
		n := int(binary.LittleEndian.Uint32(b))
		if len(b) < 4+n {
			return 0, nil, false, fmt.Errorf("%s: truncated", path)
		}
		fields, err := varintFields(b[4 : 4+n])
		if err != nil {
			return 0, nil, false, fmt.Errorf("%s: %w", path, err)
		}
		b = b[4+n:]
		if first {
			first = false
			id, ok := fields[1]
			if !ok {
				return 0, nil, false, fmt.Errorf("%s: pagemap head without pages_id", path)
			}
			pagesID = uint32(id)
			continue
		}
		e := pmEntry{vaddr: fields[fieldVaddr], n: fields[fieldCompatNrPages], off: off}
		if nr, ok := fields[fieldNrPages]; ok {
			e.n = nr
		}
		if f, ok := fields[fieldFlags]; ok {
			e.flags = uint32(f)
		} else if fields[fieldInParent] != 0 { // images older than flags
			e.flags = pePARENT
		} else {
			e.flags = pePRESENT
		}
		if e.flags&pePRESENT == 0 || e.flags&pePARENT != 0 {
			full = false
		}
		if e.flags&pePRESENT != 0 {
			off += e.n
		}
		ents = append(ents, e)
	}
	if first {
		return 0, nil, false, fmt.Errorf("%s: no pagemap head", path)
	}
	return pagesID, ents, full, nil
}

// varintFields decodes a message whose fields are all varints.
func varintFields(b []byte) (map[protowire.Number]uint64, error) {
	out := map[protowire.Number]uint64{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.VarintType {
			return nil, fmt.Errorf("field %d: wire type %d, want a varint", num, typ)
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		out[num] = v
	}
	return out, nil
}

// writePagemap writes a pagemap image as CRIU 4 does.
func writePagemap(path string, pagesID uint32, ents []pmEntry, perm os.FileMode) error {
	b := binary.LittleEndian.AppendUint32(nil, magicImgCommon)
	b = binary.LittleEndian.AppendUint32(b, magicPagemap)
	msg := func(fields ...uint64) {
		var m []byte
		for i := 0; i < len(fields); i += 2 {
			m = protowire.AppendTag(m, protowire.Number(fields[i]), protowire.VarintType)
			m = protowire.AppendVarint(m, fields[i+1])
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m)))
		b = append(b, m...)
	}
	msg(1, uint64(pagesID))
	for _, e := range ents {
		msg(fieldVaddr, e.vaddr, fieldCompatNrPages, 0, fieldFlags, uint64(e.flags), fieldNrPages, e.n)
	}
	return os.WriteFile(path, b, perm)
}

// dedupOne writes new images for one process next to the old ones. It
// returns nil when there is nothing to share (or no base to share with).
func dedupOne(dir, base, parent, name string, link func(name, to string) error) (r *rewritten, pages, shared int64, err error) {
	pagesID, ents, full, err := readPagemap(filepath.Join(dir, name))
	if err != nil {
		return nil, 0, 0, err
	}
	for _, e := range ents {
		pages += int64(e.n)
	}
	if !full {
		return nil, pages, 0, nil
	}
	basePagesID, baseEnts, baseFull, err := readPagemap(filepath.Join(base, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, pages, 0, nil // a process the base did not have
	}
	if err != nil || !baseFull {
		return nil, pages, 0, err
	}
	basePagesName := fmt.Sprintf("pages-%d.img", basePagesID)
	// Link the base's files first and compare against the links: they
	// cannot change or vanish under us, whatever happens to the base.
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, 0, 0, err
	}
	if err := os.Chmod(parent, 0o755); err != nil { // searchable like its dir
		return nil, 0, 0, err
	}
	for _, f := range []string{name, basePagesName} {
		if err := link(f, filepath.Join(parent, f)); err != nil {
			return nil, 0, 0, fmt.Errorf("dedup pages: %w", err)
		}
	}
	pagesName := fmt.Sprintf("pages-%d.img", pagesID)
	src, err := os.Open(filepath.Join(dir, pagesName))
	if err != nil {
		return nil, 0, 0, err
	}
	defer src.Close()
	bsrc, err := os.Open(filepath.Join(parent, basePagesName))
	if err != nil {
		return nil, 0, 0, err
	}
	defer bsrc.Close()

	r = &rewritten{
		pagemap: filepath.Join(dir, name), pages: filepath.Join(dir, pagesName),
		newMap: filepath.Join(dir, ".new-"+name), newPages: filepath.Join(dir, ".new-"+pagesName),
		basePages: basePagesName,
	}
	newPages, newMap := r.newPages, r.newMap
	defer func() {
		if err != nil {
			os.Remove(newPages)
			os.Remove(newMap)
		}
	}()
	st, err := src.Stat()
	if err != nil {
		return nil, 0, 0, err
	}
	out, err := os.OpenFile(r.newPages, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, st.Mode().Perm())
	if err != nil {
		return nil, 0, 0, err
	}
	defer out.Close()
	w := bufio.NewWriterSize(out, 1<<20)

	ps := uint64(os.Getpagesize())
	var runs []pmEntry
	emit := func(vaddr uint64, flags uint32) {
		if n := len(runs); n > 0 && runs[n-1].flags == flags && runs[n-1].vaddr+runs[n-1].n*ps == vaddr {
			runs[n-1].n++
			return
		}
		runs = append(runs, pmEntry{vaddr: vaddr, n: 1, flags: flags})
	}
	cur := newPageCursor(bsrc, baseEnts, ps)
	buf := make([]byte, readChunk*ps)
	for _, e := range ents {
		for i := uint64(0); i < e.n; i += readChunk {
			n := min(readChunk, e.n-i)
			b := buf[:n*ps]
			if _, err := src.ReadAt(b, int64((e.off+i)*ps)); err != nil {
				return nil, 0, 0, fmt.Errorf("%s: %w", pagesName, err)
			}
			for j := uint64(0); j < n; j++ {
				vaddr := e.vaddr + (i+j)*ps
				page := b[j*ps : (j+1)*ps]
				same, err := cur.equal(vaddr, page)
				if err != nil {
					return nil, 0, 0, err
				}
				if same {
					shared++
					// Lazy stays lazy: a lazy restore's
					// lazy-pages process serves it from the
					// parent too.
					emit(vaddr, pePARENT|e.flags&peLAZY)
					continue
				}
				if _, err := w.Write(page); err != nil {
					return nil, 0, 0, err
				}
				emit(vaddr, e.flags)
			}
		}
	}
	if shared == 0 {
		out.Close()
		os.Remove(r.newPages)
		for _, f := range []string{name, basePagesName} {
			os.Remove(filepath.Join(parent, f))
		}
		os.Remove(parent) // only if no other process linked into it
		return nil, pages, 0, nil
	}
	if err := w.Flush(); err != nil {
		return nil, 0, 0, err
	}
	if err := out.Close(); err != nil {
		return nil, 0, 0, err
	}
	if err := writePagemap(r.newMap, pagesID, runs, st.Mode().Perm()); err != nil {
		return nil, 0, 0, err
	}
	return r, pages, shared, nil
}

// readChunk is how many pages are read at a time, of the dump and of the
// base.
const readChunk = 64

// pageCursor finds base pages by address, for addresses that only grow
// (a pagemap's entries are sorted), reading the base's pages file in
// chunks.
type pageCursor struct {
	f    io.ReaderAt
	ents []pmEntry
	ps   uint64
	i    int    // the entry at or after the last address asked for
	buf  []byte // base pages [from, from+have) of the file, by index
	from uint64
	have uint64
}

func newPageCursor(f io.ReaderAt, ents []pmEntry, ps uint64) *pageCursor {
	return &pageCursor{f: f, ents: ents, ps: ps, buf: make([]byte, readChunk*ps)}
}

// equal reports whether the base has a page at vaddr equal to page.
func (c *pageCursor) equal(vaddr uint64, page []byte) (bool, error) {
	for c.i < len(c.ents) && c.ents[c.i].vaddr+c.ents[c.i].n*c.ps <= vaddr {
		c.i++
	}
	if c.i == len(c.ents) || vaddr < c.ents[c.i].vaddr {
		return false, nil
	}
	e := c.ents[c.i]
	idx := e.off + (vaddr-e.vaddr)/c.ps // page index in the base's pages file
	if idx < c.from || idx >= c.from+c.have {
		// Read ahead within this entry only.
		n := min(uint64(len(c.buf))/c.ps, e.off+e.n-idx)
		if _, err := c.f.ReadAt(c.buf[:n*c.ps], int64(idx*c.ps)); err != nil {
			return false, fmt.Errorf("base pages: %w", err)
		}
		c.from, c.have = idx, n
	}
	at := (idx - c.from) * c.ps
	return bytes.Equal(c.buf[at:at+c.ps], page), nil
}
