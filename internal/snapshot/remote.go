package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/forkbox/forkbox/internal/blob"
	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/durable"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/fault"
)

// Remote is the object store behind a Store: *blob.S3 is one. Keys are
// slash-separated; a missing object is an errdefs.ErrNotFound error.
type Remote interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (size int64, modTime time.Time, err error)
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, prefix string) ([]blob.Object, error)
}

// toucher is a Remote that can make an object young again without sending
// its bytes (blob.S3 does, by a server-side copy).
type toucher interface {
	Touch(ctx context.Context, key string) error
}

const (
	blobPrefix     = "blobs/sha256/"
	manifestPrefix = "snapshots/"
	// FaultUploading is the fault point (FORKBOX_FAULT, package fault)
	// reached by a commit with a remote after its first blob and before
	// its manifest is uploaded.
	FaultUploading = "snapshot:uploading"
	// RecentUse is how long after its last use (Commit, Verify, Path,
	// Clone) a snapshot's cached copy is never evicted.
	RecentUse = 5 * time.Minute
	// refreshAge: a commit that finds a blob it needs already uploaded
	// makes it young again when it is older than this, so that a GC
	// (whose grace must be longer: the daemon's is an hour) running on
	// another node before the commit's manifest lands does not take it.
	refreshAge = 20 * time.Minute
	// maxManifest bounds a downloaded manifest.
	maxManifest = 64 << 20
	// unpublishTimeout bounds the removal of a manifest whose local commit
	// failed.
	unpublishTimeout = time.Minute
)

func blobKey(sum string) string    { return blobPrefix + sum }
func manifestKey(id string) string { return manifestPrefix + id + "/" + manifestName }
func isHex64(s string) bool        { _, err := hex.DecodeString(s); return err == nil && len(s) == 64 }
func validID(id string) bool       { return id != "" && !strings.ContainsAny(id, "/.") }
func badID(id string) error        { return errdefs.InvalidArgument("bad snapshot id %q", id) }
func (s *Store) remote() Remote    { s.r.mu.Lock(); defer s.r.mu.Unlock(); return s.r.rem }
func idOfManifestKey(k string) string {
	k = strings.TrimPrefix(k, manifestPrefix)
	id, rest, ok := strings.Cut(k, "/")
	if !ok || rest != manifestName || !validID(id) {
		return ""
	}
	return id
}

// remoteState is a Store's object store, its cache bookkeeping and what
// this node is uploading.
type remoteState struct {
	mu         sync.Mutex
	rem        Remote
	cacheBytes int64
	recent     time.Duration // RecentUse; tests shorten it
	lastUse    map[string]time.Time
	remoteIDs  map[string]bool     // ids known to have their manifest remotely
	manifests  map[string][]string // id → its blob hashes (manifests never change)
	ids        map[string]*idLock
	inflight   map[string]int // blob hash → uploads in progress that need it
	inflightID map[string]int // snapshot id → uploads in progress
	gcRuns     int
	gcSeen     map[string]bool // hashes and ids that uploads took while a GC ran
	evictMu    sync.Mutex
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

func newRemoteState() remoteState {
	return remoteState{recent: RecentUse, lastUse: map[string]time.Time{}, remoteIDs: map[string]bool{},
		manifests: map[string][]string{}, ids: map[string]*idLock{}, inflight: map[string]int{},
		inflightID: map[string]int{}, gcSeen: map[string]bool{}}
}

// SetRemote puts object store r behind the store: commits upload to it,
// Verify and Clone fetch from it what is missing on disk, and the local
// snapshot directories become a cache of at most cacheBytes (0 or less:
// unbounded). Call it once, before the store is used.
func (s *Store) SetRemote(r Remote, cacheBytes int64) {
	s.r.mu.Lock()
	s.r.rem = r
	s.r.cacheBytes = cacheBytes
	s.r.mu.Unlock()
}

// touchUse records a use of id's cached copy.
func (s *Store) touchUse(id string) {
	s.r.mu.Lock()
	if s.r.rem != nil {
		s.r.lastUse[id] = time.Now()
	}
	s.r.mu.Unlock()
}

// lockID takes the per-snapshot lock that serializes fetches, commits and
// deletes of one id.
func (s *Store) lockID(id string) (unlock func()) {
	s.r.mu.Lock()
	l := s.r.ids[id]
	if l == nil {
		l = &idLock{}
		s.r.ids[id] = l
	}
	l.refs++
	s.r.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.r.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.r.ids, id)
		}
		s.r.mu.Unlock()
	}
}

// hold marks the blobs and the id of an upload in progress, which GC
// spares; release ends that.
func (s *Store) hold(id string, sums []string) (release func()) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.inflightID[id]++
	for _, h := range sums {
		s.r.inflight[h]++
	}
	if s.r.gcRuns > 0 {
		s.r.gcSeen[id] = true
		for _, h := range sums {
			s.r.gcSeen[h] = true
		}
	}
	return func() {
		s.r.mu.Lock()
		defer s.r.mu.Unlock()
		if s.r.inflightID[id]--; s.r.inflightID[id] == 0 {
			delete(s.r.inflightID, id)
		}
		for _, h := range sums {
			if s.r.inflight[h]--; s.r.inflight[h] == 0 {
				delete(s.r.inflight, h)
			}
		}
	}
}

// upload sends a pending snapshot's files (by content, skipping those
// already there) and then its manifest mb, written in dir.
func (s *Store) upload(ctx context.Context, id, dir string, m *Manifest, mb []byte) error {
	r := s.remote()
	first := map[string]string{} // hash → a file with that content
	for rel, h := range m.Files {
		if !isHex64(h) {
			return fmt.Errorf("upload snapshot %s: %s has a bad checksum %q", id, rel, h)
		}
		if f, ok := first[h]; !ok || rel < f {
			first[h] = rel
		}
	}
	sums := make([]string, 0, len(first))
	for h := range first {
		sums = append(sums, h)
	}
	sort.Strings(sums)
	defer s.hold(id, sums)()
	for i, h := range sums {
		if err := s.uploadBlob(ctx, r, h, filepath.Join(dir, filepath.FromSlash(first[h]))); err != nil {
			return fmt.Errorf("upload snapshot %s: %s: %w", id, first[h], err)
		}
		if i == 0 {
			fault.Point(FaultUploading)
		}
	}
	if err := r.Put(ctx, manifestKey(id), bytes.NewReader(mb), int64(len(mb))); err != nil {
		return fmt.Errorf("upload snapshot %s: manifest: %w", id, err)
	}
	s.r.mu.Lock()
	s.r.manifests[id] = sums
	s.r.remoteIDs[id] = true
	s.r.mu.Unlock()
	return nil
}

// uploadBlob puts the file at path as the blob of hash h unless the store
// has it already (then it makes an old one young again).
func (s *Store) uploadBlob(ctx context.Context, r Remote, h, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	key := blobKey(h)
	size, mod, err := r.Stat(ctx, key)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
	case err != nil:
		return err
	case size != st.Size():
		// Not what its name says: replace it.
	case time.Since(mod) < refreshAge:
		return nil
	default:
		if t, ok := r.(toucher); ok {
			if err := t.Touch(ctx, key); err == nil {
				return nil
			}
		}
	}
	return r.Put(ctx, key, f, st.Size())
}

// unpublish removes the manifest of a commit that failed after uploading
// it (best effort: GC removes it otherwise, as no record names it).
func (s *Store) unpublish(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), unpublishTimeout)
	defer cancel()
	if err := s.deleteRemote(ctx, id); err != nil {
		slog.Warn("snapshot: remove the manifest of a failed commit", "snapshot", id, "err", err)
	}
}

func (s *Store) deleteRemote(ctx context.Context, id string) error {
	if err := s.remote().Delete(ctx, manifestKey(id)); err != nil {
		return fmt.Errorf("delete snapshot %s from the object store: %w", id, err)
	}
	s.r.mu.Lock()
	delete(s.r.manifests, id)
	delete(s.r.remoteIDs, id)
	delete(s.r.lastUse, id)
	s.r.mu.Unlock()
	return nil
}

// committed is called after a commit with a remote put id in place.
func (s *Store) committed(id string) {
	s.touchUse(id)
	s.evict()
}

// fetch downloads snapshot id when it is missing on disk. It reports
// whether it did (the files were checked while written).
func (s *Store) fetch(ctx context.Context, id, checksum string) (_ bool, err error) {
	if !validID(id) {
		return false, badID(id)
	}
	if _, err := os.Stat(s.path(id)); err == nil {
		return false, nil
	}
	unlock := s.lockID(id)
	defer unlock()
	if _, err := os.Stat(s.path(id)); err == nil {
		return false, nil // another Verify fetched it meanwhile
	}
	r := s.remote()
	rc, err := r.Get(ctx, manifestKey(id))
	if errors.Is(err, errdefs.ErrNotFound) {
		return false, errdefs.FailedPrecondition("snapshot %s is missing its files on disk and in the object store", id)
	}
	if err != nil {
		return false, fmt.Errorf("fetch snapshot %s: %w", id, err)
	}
	mb, err := io.ReadAll(io.LimitReader(rc, maxManifest+1))
	rc.Close()
	if err != nil {
		return false, fmt.Errorf("fetch snapshot %s: manifest: %w", id, err)
	}
	sum := sha256.Sum256(mb)
	if checksum != "" && hex.EncodeToString(sum[:]) != checksum {
		return false, errdefs.FailedPrecondition("snapshot %s is corrupt: its manifest in the object store does not match the recorded checksum; refusing to restore it", id)
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil || len(mb) > maxManifest {
		return false, errdefs.FailedPrecondition("snapshot %s is corrupt: unreadable manifest in the object store; refusing to restore it", id)
	}
	what, need := "snapshot "+id+" (fetched from object storage)", m.SizeBytes+m.SharedBytes
	if err := diskspace.Check(s.dir, what, need); err != nil {
		return false, err
	}
	defer func() { err = diskspace.Map(err, s.dir, what, need) }()
	tmp := filepath.Join(s.dir, ".tmp-"+id)
	if err := os.RemoveAll(tmp); err != nil {
		return false, err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return false, err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	have := map[string]string{} // hash → a file fetched with it
	dirs := map[string]bool{tmp: true}
	var sums []string
	for _, rel := range names {
		h := m.Files[rel]
		to := filepath.Join(tmp, filepath.FromSlash(rel))
		if !isHex64(h) || !strings.HasPrefix(to, tmp+string(filepath.Separator)) {
			return false, errdefs.FailedPrecondition("snapshot %s is corrupt: its manifest names %q with %q; refusing to restore it", id, rel, h)
		}
		for d := filepath.Dir(to); d != tmp && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
			return false, err
		}
		if from, ok := have[h]; ok {
			if err := os.Link(from, to); err != nil {
				if err := copyFile(from, to); err != nil {
					return false, fmt.Errorf("fetch snapshot %s: %w", id, err)
				}
			}
		} else {
			if err := fetchBlob(ctx, r, id, rel, h, to); err != nil {
				return false, err
			}
			have[h] = to
			sums = append(sums, h)
		}
		if mode, ok := m.Modes[rel]; ok {
			if err := os.Chmod(to, fs.FileMode(mode).Perm()); err != nil {
				return false, err
			}
		}
	}
	for rel, mode := range m.Dirs {
		d := filepath.Join(tmp, filepath.FromSlash(rel))
		if d != tmp && !dirs[d] {
			if !strings.HasPrefix(d, tmp+string(filepath.Separator)) {
				return false, errdefs.FailedPrecondition("snapshot %s is corrupt: its manifest names directory %q; refusing to restore it", id, rel)
			}
			if err := os.MkdirAll(d, 0o700); err != nil {
				return false, err
			}
			dirs[d] = true
		}
		if err := os.Chmod(d, fs.FileMode(mode).Perm()); err != nil {
			return false, err
		}
	}
	if err := durable.WriteFile(filepath.Join(tmp, manifestName), mb, 0o600); err != nil {
		return false, err
	}
	list := make([]string, 0, len(dirs))
	for d := range dirs {
		list = append(list, d)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(list))) // children before parents
	for _, d := range list {
		if err := syncDir(d); err != nil {
			return false, err
		}
	}
	if err := os.Rename(tmp, s.path(id)); err != nil {
		return false, fmt.Errorf("fetch snapshot %s: %w", id, err)
	}
	done = true
	if err := syncDir(s.dir); err != nil {
		return false, err
	}
	sort.Strings(sums)
	s.r.mu.Lock()
	s.r.manifests[id] = sums
	s.r.remoteIDs[id] = true
	s.r.lastUse[id] = time.Now()
	s.r.mu.Unlock()
	s.evict()
	return true, nil
}

// fetchBlob downloads blob h into a new file at path, hashing it on the
// way, and fsyncs it.
func fetchBlob(ctx context.Context, r Remote, id, rel, h, path string) error {
	rc, err := r.Get(ctx, blobKey(h))
	if errors.Is(err, errdefs.ErrNotFound) {
		return errdefs.FailedPrecondition("snapshot %s is corrupt: %s is missing from the object store; refusing to restore it", id, rel)
	}
	if err != nil {
		return fmt.Errorf("fetch snapshot %s: %s: %w", id, rel, err)
	}
	defer rc.Close()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	hw := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, hw), rc); err != nil {
		f.Close()
		return fmt.Errorf("fetch snapshot %s: %s: %w", id, rel, err)
	}
	if hex.EncodeToString(hw.Sum(nil)) != h {
		f.Close()
		return errdefs.FailedPrecondition("snapshot %s is corrupt: %s in the object store does not match its checksum; refusing to restore it", id, rel)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// collectModes records the permission bits of dir's files and directories
// in m.
func collectModes(dir string, m *Manifest) error {
	m.Modes, m.Dirs = map[string]uint32{}, map[string]uint32{}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		if rel == manifestName {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			m.Dirs[rel] = uint32(info.Mode().Perm())
		} else if _, ok := m.Files[rel]; ok {
			m.Modes[rel] = uint32(info.Mode().Perm())
		}
		return nil
	})
}

// evict removes least recently used cached snapshots that are in the
// object store until the cache fits its budget, sparing those used in the
// last RecentUse.
func (s *Store) evict() {
	s.r.mu.Lock()
	budget, r, recent := s.r.cacheBytes, s.r.rem, s.r.recent
	s.r.mu.Unlock()
	if budget <= 0 || r == nil {
		return
	}
	s.r.evictMu.Lock()
	defer s.r.evictMu.Unlock()
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		slog.Warn("snapshot cache: list", "err", err)
		return
	}
	type cached struct {
		id   string
		size int64
		used time.Time
	}
	var all []cached
	var total int64
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		c := cached{id: e.Name(), size: dirSize(filepath.Join(s.dir, e.Name()))}
		total += c.size
		s.r.mu.Lock()
		c.used = s.r.lastUse[c.id]
		s.r.mu.Unlock()
		if c.used.IsZero() {
			if info, err := e.Info(); err == nil {
				c.used = info.ModTime()
			}
		}
		all = append(all, c)
	}
	if total <= budget {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.Before(all[j].used) })
	for _, c := range all {
		if total <= budget {
			return
		}
		if time.Since(c.used) < recent || !s.inRemote(r, c.id) {
			continue
		}
		// Check the last use and move the copy aside in one step under
		// the lock that touchUse takes: a Verify either counts as a use
		// first (and the copy stays) or finds it gone and fetches it.
		gone := filepath.Join(s.dir, ".tmp.evict-"+c.id)
		s.r.mu.Lock()
		used, ok := s.r.lastUse[c.id]
		if ok && time.Since(used) < recent {
			s.r.mu.Unlock()
			continue
		}
		err := os.Rename(filepath.Join(s.dir, c.id), gone)
		if err == nil {
			delete(s.r.lastUse, c.id)
		}
		s.r.mu.Unlock()
		if err != nil {
			slog.Warn("snapshot cache: evict", "snapshot", c.id, "err", err)
			continue
		}
		if err := os.RemoveAll(gone); err != nil {
			slog.Warn("snapshot cache: evict", "snapshot", c.id, "err", err)
		}
		total -= c.size
		slog.Debug("snapshot cache: evicted", "snapshot", c.id, "bytes", c.size)
	}
}

// inRemote reports whether id's manifest is in the object store.
func (s *Store) inRemote(r Remote, id string) bool {
	s.r.mu.Lock()
	known := s.r.remoteIDs[id]
	s.r.mu.Unlock()
	if known {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := r.Stat(ctx, manifestKey(id)); err != nil {
		return false
	}
	s.r.mu.Lock()
	s.r.remoteIDs[id] = true
	s.r.mu.Unlock()
	return true
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// GC removes from the object store the manifests of snapshots that keep
// does not know (the metadata DB has no record of them) and then the blobs
// that no remaining manifest references, of both only those older than
// grace. It never removes what an upload in progress on this node needs;
// grace protects those of other nodes (make it far longer than a commit
// and its record take: the daemon uses an hour). It returns how many
// objects it removed.
func (s *Store) GC(ctx context.Context, keep func(id string) bool, grace time.Duration) (removed int, err error) {
	r := s.remote()
	if r == nil {
		return 0, nil
	}
	s.r.mu.Lock()
	s.r.gcRuns++
	// Uploads under way now stay spared for the whole run, even once they
	// end: their manifests may land after the listing below.
	for k := range s.r.inflight {
		s.r.gcSeen[k] = true
	}
	for k := range s.r.inflightID {
		s.r.gcSeen[k] = true
	}
	s.r.mu.Unlock()
	defer func() {
		s.r.mu.Lock()
		if s.r.gcRuns--; s.r.gcRuns == 0 {
			s.r.gcSeen = map[string]bool{}
		}
		s.r.mu.Unlock()
	}()
	busy := func(k string) bool {
		s.r.mu.Lock()
		defer s.r.mu.Unlock()
		return s.r.inflight[k] > 0 || s.r.inflightID[k] > 0 || s.r.gcSeen[k]
	}
	now := time.Now()
	objs, err := r.List(ctx, manifestPrefix)
	if err != nil {
		return 0, fmt.Errorf("snapshot gc: %w", err)
	}
	referenced := map[string]bool{}
	for _, o := range objs {
		id := idOfManifestKey(o.Key)
		if id == "" {
			continue // not ours
		}
		if !keep(id) && !busy(id) && now.Sub(o.ModTime) >= grace {
			if err := s.deleteRemote(ctx, id); err != nil {
				return removed, fmt.Errorf("snapshot gc: %w", err)
			}
			removed++
			slog.Info("snapshot gc: removed the manifest of an unknown snapshot", "snapshot", id)
			continue
		}
		sums, err := s.manifestSums(ctx, r, id)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			// Its blobs are unknown: remove none this time.
			return removed, fmt.Errorf("snapshot gc: %w", err)
		}
		for _, h := range sums {
			referenced[h] = true
		}
	}
	blobs, err := r.List(ctx, blobPrefix)
	if err != nil {
		return removed, fmt.Errorf("snapshot gc: %w", err)
	}
	for _, o := range blobs {
		h := strings.TrimPrefix(o.Key, blobPrefix)
		if !isHex64(h) || referenced[h] || busy(h) || now.Sub(o.ModTime) < grace {
			continue
		}
		if err := r.Delete(ctx, o.Key); err != nil {
			return removed, fmt.Errorf("snapshot gc: %w", err)
		}
		removed++
	}
	return removed, nil
}

// manifestSums is the blob hashes that id's remote manifest references.
func (s *Store) manifestSums(ctx context.Context, r Remote, id string) ([]string, error) {
	s.r.mu.Lock()
	sums, ok := s.r.manifests[id]
	s.r.mu.Unlock()
	if ok {
		return sums, nil
	}
	rc, err := r.Get(ctx, manifestKey(id))
	if err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", id, err)
	}
	b, err := io.ReadAll(io.LimitReader(rc, maxManifest))
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", id, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest of %s is unreadable: %w", id, err)
	}
	set := map[string]bool{}
	for _, h := range m.Files {
		set[h] = true
	}
	for h := range set {
		sums = append(sums, h)
	}
	sort.Strings(sums)
	s.r.mu.Lock()
	s.r.manifests[id] = sums
	s.r.mu.Unlock()
	return sums, nil
}
