// Package userns hands out the host id ranges that sandboxes' user
// namespaces map onto. Every sandbox runs in a user namespace whose ids
// 0..Size-1 (its root, uid 1000, nobody, whatever an image's files use) are
// host ids Base..Base+Size-1: unprivileged on the host, owned by no host
// account, and apart from every other lineage's range.
//
// A *lineage* is a sandbox and everything restored from it: its memory and
// filesystem snapshots, forks, the sandboxes a warm pool restores from them,
// its own resumes. A lineage keeps one range, because a memory snapshot's
// processes and its files carry their host ids (CRIU restores the user
// namespace with the mapping it saved, and the writable layer stores host
// ids on disk); a fresh sandbox from an image starts a new lineage and a new
// range.
//
// Lifecycle: the daemon makes an Allocator at start (New), marks the ranges
// that its metadata store still references (Reserve), and from then on
// Alloc hands out free ranges and Sweep returns to the pool the ranges that
// nothing references any more. Pin keeps a range out of Sweep while it is
// being set up (a pre-started sandbox init holds one before any record
// names it) or while a sandbox of it runs.
//
// Several daemons on one host (tests run many) must never hand out the same
// range: each range a daemon uses is claimed host-wide by a file in a claim
// directory (by default /run/forkbox/userns, a tmpfs that a reboot empties)
// created with O_EXCL and naming the daemon's data dir. A claim whose data
// dir no longer exists is stale and taken over.
package userns

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// Size is the number of ids in a range: the whole 16-bit id space that
// images use (0 root … 65534 nobody).
const Size = 65536

// DefaultFirst is the first host id of the default pool: 2^30, above the
// ids that host accounts, /etc/subuid ranges of rootless tools and most
// container hosts use.
const DefaultFirst uint32 = 1 << 30

// DefaultCount is the default number of ranges: 16384 ranges of 65536 ids,
// 2^30 … 2^31-1 (below 2^31, so tools that print ids as signed 32-bit
// numbers show them right).
const DefaultCount = 16384

// Allocator hands out ranges. Safe for concurrent use.
type Allocator struct {
	first  uint32
	count  int
	claims string // the host-wide claim directory
	owner  string // this daemon's data dir, written into its claims

	mu     sync.Mutex
	used   map[uint32]bool // referenced or pinned
	pinned map[uint32]int
	next   int // where Alloc looks first: one past the range it last handed out
}

// DefaultClaimDir is where daemons claim ranges host-wide.
const DefaultClaimDir = "/run/forkbox/userns"

// New returns an Allocator over count ranges of Size ids starting at first,
// claiming them in claimDir on behalf of owner (an absolute data dir). It
// refuses a pool that overlaps an id of a host account or group, a
// subordinate range of /etc/subuid or /etc/subgid, or that lies outside the
// ids this process's own user namespace maps.
func New(first uint32, count int, claimDir, owner string) (*Allocator, error) {
	if count < 1 {
		return nil, fmt.Errorf("user namespace ranges: count %d must be at least 1", count)
	}
	end := uint64(first) + uint64(count)*Size // exclusive
	if end > 1<<32-1 {
		return nil, fmt.Errorf("user namespace ranges: %d ranges from %d end past the last host id", count, first)
	}
	if err := checkHost(uint64(first), end); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(claimDir, 0o700); err != nil {
		return nil, fmt.Errorf("user namespace claims: %w", err)
	}
	return &Allocator{first: first, count: count, claims: claimDir, owner: owner,
		used: map[uint32]bool{}, pinned: map[uint32]int{}}, nil
}

// claim takes base host-wide for this daemon; it reports false when another
// live daemon holds it.
func (a *Allocator) claim(base uint32) (bool, error) {
	path := filepath.Join(a.claims, strconv.FormatUint(uint64(base), 10))
	for i := 0; i < 2; i++ {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, werr := f.WriteString(a.owner)
			cerr := f.Close()
			return true, errors.Join(werr, cerr)
		}
		if !errors.Is(err, os.ErrExist) {
			return false, fmt.Errorf("claim id range %d: %w", base, err)
		}
		b, rerr := os.ReadFile(path)
		if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return false, rerr
		}
		holder := string(b)
		if holder == a.owner {
			return true, nil
		}
		if _, serr := os.Stat(holder); rerr == nil && (holder == "" || serr == nil) {
			return false, nil // a live daemon's
		}
		os.Remove(path) // stale: its daemon's data dir is gone
	}
	return false, nil
}

// Owns reports whether base is claimed host-wide by this allocator's
// owner (its data dir): a range of this daemon's sandboxes, now or before
// a restart.
func (a *Allocator) Owns(base uint32) bool {
	b, err := os.ReadFile(filepath.Join(a.claims, strconv.FormatUint(uint64(base), 10)))
	return err == nil && string(b) == a.owner
}

// unclaim gives base back host-wide.
func (a *Allocator) unclaim(base uint32) {
	path := filepath.Join(a.claims, strconv.FormatUint(uint64(base), 10))
	if b, err := os.ReadFile(path); err == nil && string(b) == a.owner {
		os.Remove(path)
	}
}

// Range returns the pool's first host id and its end (exclusive).
func (a *Allocator) Range() (first, end uint64) {
	return uint64(a.first), uint64(a.first) + uint64(a.count)*Size
}

// Valid reports whether base is the start of one of the pool's ranges.
func (a *Allocator) Valid(base uint32) bool {
	return base >= a.first && (base-a.first)%Size == 0 && int((base-a.first)/Size) < a.count
}

// Alloc returns a free range's base and pins it (Unpin when a record names
// it, or when it is not used after all).
func (a *Allocator) Alloc() (uint32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Next fit: ranges before the cursor were in use or claimed by another
	// daemon a moment ago, and checking another daemon's claim costs file
	// reads. Starting where the last one was found keeps Alloc to one claim
	// whatever other daemons on the host hold; freed ranges come round
	// again when the cursor wraps.
	for n := 0; n < a.count; n++ {
		i := (a.next + n) % a.count
		b := a.first + uint32(i)*Size
		if a.used[b] {
			continue
		}
		ok, err := a.claim(b)
		if err != nil {
			return 0, err
		}
		if ok {
			a.used[b] = true
			a.pinned[b]++
			a.next = (i + 1) % a.count
			return b, nil
		}
	}
	return 0, errdefs.ResourceExhausted("all %d user namespace id ranges are in use (daemon flag --userns-count raises it)", a.count)
}

// Reserve marks base used (a record references it). Bases outside the pool
// are refused: a record from a daemon configured with another pool.
func (a *Allocator) Reserve(base uint32) error {
	if !a.Valid(base) {
		first, end := a.Range()
		return fmt.Errorf("id range at %d is not one of this daemon's user namespace ranges [%d, %d)", base, first, end)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.used[base] {
		return nil
	}
	ok, err := a.claim(base)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("id range at %d is claimed by another forkbox daemon on this host (%s); give the daemons disjoint --userns-first ranges", base, a.claims)
	}
	a.used[base] = true
	return nil
}

// Pin keeps base used until Unpin, whatever Sweep finds.
func (a *Allocator) Pin(base uint32) error {
	if err := a.Reserve(base); err != nil {
		return err
	}
	a.mu.Lock()
	a.pinned[base]++
	a.mu.Unlock()
	return nil
}

// Unpin undoes one Pin or Alloc.
func (a *Allocator) Unpin(base uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pinned[base] > 1 {
		a.pinned[base]--
		return
	}
	delete(a.pinned, base)
}

// Sweep frees every used range that is neither pinned nor in referenced
// (the bases the metadata store names now). It returns how many it freed.
func (a *Allocator) Sweep(referenced map[uint32]bool) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for b := range a.used {
		if !referenced[b] && a.pinned[b] == 0 {
			delete(a.used, b)
			a.unclaim(b)
			n++
		}
	}
	return n
}

// InUse is the number of ranges in use (for metrics and tests).
func (a *Allocator) InUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.used)
}

// checkHost refuses [first, end) when it meets an id of the host.
func checkHost(first, end uint64) error {
	overlaps := func(lo, hi uint64) bool { return lo < end && first < hi }
	for _, f := range []string{"/etc/passwd", "/etc/group"} {
		ids, err := accountIDs(f)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if overlaps(id, id+1) {
				return fmt.Errorf("user namespace ranges [%d, %d) contain id %d of %s; choose another --userns-first", first, end, id, f)
			}
		}
	}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		rs, err := subRanges(f)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if overlaps(r[0], r[0]+r[1]) {
				return fmt.Errorf("user namespace ranges [%d, %d) overlap %s's range [%d, %d); choose another --userns-first",
					first, end, f, r[0], r[0]+r[1])
			}
		}
	}
	for _, f := range []string{"/proc/self/uid_map", "/proc/self/gid_map"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		inside := false
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			fs := strings.Fields(line)
			if len(fs) != 3 {
				continue
			}
			lo, _ := strconv.ParseUint(fs[0], 10, 64)
			n, _ := strconv.ParseUint(fs[2], 10, 64)
			if first >= lo && end <= lo+n {
				inside = true
			}
		}
		if !inside {
			return fmt.Errorf("user namespace ranges [%d, %d) are not mapped in the daemon's own user namespace (%s)", first, end, f)
		}
	}
	return nil
}

// accountIDs reads the numeric ids (third field) of a passwd or group file.
func accountIDs(path string) ([]uint64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ids []uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 3 {
			continue
		}
		if id, err := strconv.ParseUint(fs[2], 10, 32); err == nil {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, sc.Err()
}

// subRanges reads name:start:count lines.
func subRanges(path string) ([][2]uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out [][2]uint64
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Split(strings.TrimSpace(line), ":")
		if len(fs) != 3 {
			continue
		}
		s, err1 := strconv.ParseUint(fs[1], 10, 64)
		n, err2 := strconv.ParseUint(fs[2], 10, 64)
		if err1 == nil && err2 == nil {
			out = append(out, [2]uint64{s, n})
		}
	}
	return out, nil
}
