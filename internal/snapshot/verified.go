package snapshot

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Integrity off the hot path. Hashing a memory snapshot before every
// restore costs ~100 ms of CPU for a 112 MiB kernel; the files of a
// committed snapshot are never written again, so once a snapshot has been
// hashed (at Commit, by a full Verify, or by a fetch) this process keeps a
// mark of it: the manifest's checksum and, for each file, its inode, size,
// modification time and change time. A Verify whose snapshot still matches
// its mark trusts it without hashing. Anything that writes a file, renames
// another over it, or changes its metadata moves its change time (which no
// system call can set back), so a tampered file no longer matches and is
// hashed again — and refused (files shared by hard links are the one
// exception: see stamp.unchanged). Marks live in memory only: after a daemon
// restart every snapshot is hashed in full before its first use. A mark
// older than reverifyAfter is still trusted, but its snapshot is hashed
// again in the background, and the mark dropped if it fails.
const reverifyAfter = time.Hour

// stamp identifies one version of a file.
type stamp struct {
	ino, size, nlink uint64
	mtim, ctim       syscall.Timespec
}

// unchanged reports whether the file stamped now is the version stamped
// then. Inode, size and modification time must match, and the change time
// too, except for a file with more than one link: snapshots share files by
// hard links (Clone, and memory snapshots linking their base's pages: see
// Pending.Shared), and every link made or removed anywhere moves a shared
// file's change time. For those a write still moves the modification
// time; setting it back takes root on the host, which could as well
// rewrite the manifest and the recorded checksum.
func (now stamp) unchanged(then stamp) bool {
	if now.ino != then.ino || now.size != then.size || now.mtim != then.mtim {
		return false
	}
	return now.ctim == then.ctim || now.nlink > 1 && then.nlink > 1
}

// mark is a snapshot this process hashed and found whole.
type mark struct {
	checksum string
	files    map[string]stamp // by manifest path, the manifest itself included
	at       time.Time
}

type marks struct {
	mu   sync.Mutex
	m    map[string]*mark
	busy map[string]bool // background re-verifications under way
}

func statStamp(path string) (stamp, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return stamp{}, err
	}
	return stamp{ino: st.Ino, size: uint64(st.Size), nlink: uint64(st.Nlink), mtim: st.Mtim, ctim: st.Ctim}, nil
}

// stampAll stamps a snapshot's manifest and files (nil when one is
// missing).
func stampAll(dir string, names []string) map[string]stamp {
	out := make(map[string]stamp, len(names)+1)
	for _, n := range append([]string{manifestName}, names...) {
		st, err := statStamp(filepath.Join(dir, filepath.FromSlash(n)))
		if err != nil {
			return nil
		}
		out[n] = st
	}
	return out
}

// remember marks snapshot id (whose files are names) as hashed and whole
// with checksum; before are the stamps taken before hashing (nil: take
// them now), so that a file written while it was hashed is not trusted.
func (s *Store) remember(id, checksum string, names []string, before map[string]stamp) {
	after := stampAll(s.path(id), names)
	if after == nil {
		return
	}
	if before != nil {
		for n, st := range after {
			if before[n] != st {
				return
			}
		}
	}
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
	if s.v.m == nil {
		s.v.m = map[string]*mark{}
	}
	s.v.m[id] = &mark{checksum: checksum, files: after, at: time.Now()}
}

// restamp renews the stamp of file rel in snapshot id's mark (after this
// process linked it: see LinkFile).
func (s *Store) restamp(id, rel string) {
	st, err := statStamp(filepath.Join(s.path(id), filepath.FromSlash(rel)))
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
	if mk := s.v.m[id]; mk != nil {
		if _, ok := mk.files[rel]; ok && err == nil {
			mk.files[rel] = st
		}
	}
}

// forget drops snapshot id's mark.
func (s *Store) forget(id string) {
	s.v.mu.Lock()
	delete(s.v.m, id)
	s.v.mu.Unlock()
}

// trusted reports whether snapshot id matches a mark made with checksum,
// file for file. An old mark starts a background re-verification.
func (s *Store) trusted(id, checksum string) bool {
	s.v.mu.Lock()
	mk := s.v.m[id]
	s.v.mu.Unlock()
	if mk == nil || mk.checksum != checksum || checksum == "" {
		return false
	}
	dir := s.path(id)
	for n, want := range mk.files {
		got, err := statStamp(filepath.Join(dir, filepath.FromSlash(n)))
		if err != nil || !got.unchanged(want) {
			s.forget(id)
			return false
		}
	}
	if time.Since(mk.at) > reverifyAfter {
		s.reverifyLater(id, checksum)
	}
	return true
}

// reverifyLater hashes snapshot id again in the background: its mark is
// renewed if it is whole, dropped if not (the next Verify then refuses it).
func (s *Store) reverifyLater(id, checksum string) {
	s.v.mu.Lock()
	if s.v.busy == nil {
		s.v.busy = map[string]bool{}
	}
	if s.v.busy[id] {
		s.v.mu.Unlock()
		return
	}
	s.v.busy[id] = true
	s.v.mu.Unlock()
	go func() {
		defer func() {
			s.v.mu.Lock()
			delete(s.v.busy, id)
			s.v.mu.Unlock()
		}()
		s.forgetIfCorrupt(id, checksum)
	}()
}

// forgetIfCorrupt hashes snapshot id in full; the mark is renewed when it is
// whole and dropped when not.
func (s *Store) forgetIfCorrupt(id, checksum string) {
	if err := s.hashVerify(id, checksum); err != nil {
		s.forget(id)
	}
}

// manifestNames reads the file names of a committed snapshot's manifest.
func manifestNames(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	return names, nil
}
