// Package snapshot keeps the files of snapshots on disk, durably and
// verifiably. A snapshot is written into a temporary directory (Begin), then
// Commit hashes every file into a manifest, fsyncs files and directories and
// renames the directory into place: a crash leaves either no snapshot or a
// whole one, and a half-written one never replaces a good one. Verify
// re-hashes the files against the manifest before a restore, so a corrupt
// snapshot is refused instead of restored.
//
// Layout under the store's directory:
//
//	<id>/manifest.json   {"files": {"fs.tar": "<sha256>", "criu/pages-1.img": …}, "size_bytes": N}
//	<id>/fs.tar          the sandbox's writable layer (overlay upper), with xattrs
//	<id>/criu/           CRIU images, for memory snapshots
//	<id>/criu/parent/    hard links to a base snapshot's page images, whose
//	                     pages this one shares (see Pending.Shared)
//	.tmp-<id>/           a snapshot being written or fetched (removed at Open)
//	.tmp.evict-<id>/     a cached copy being evicted (removed at Open)
//
// # Object storage
//
// With SetRemote, snapshots (suspend images included) live in an
// S3-compatible object store that every node of a cluster shares, and the
// directory above is this node's cache of them:
//
//	blobs/sha256/<hex>            a file's content, by its sha256: the
//	                              snapshots of one lineage share their
//	                              unchanged files (a blob already there is
//	                              not uploaded again)
//	snapshots/<id>/manifest.json  the manifest, byte for byte the local one
//	                              (so the recorded checksum holds), with
//	                              the files' and directories' modes
//
// Commit uploads the blobs and then the manifest before it moves the
// snapshot into place, and fails (nothing committed, locally or remotely)
// if any upload does: a snapshot is committed only when it is durable in
// the object store, and nothing half-written is ever visible (a crash
// mid-upload leaves blobs that no manifest names, which GC removes).
// Verify and Clone fetch a snapshot missing on disk — its manifest checked
// against the recorded checksum, each file against its hash while it is
// written — into .tmp-<id> and move it into place; fetches of one id are
// serialized. Delete removes the cached copy and the manifest; GC removes
// manifests that no record names and blobs that no manifest names.
//
// The cache holds at most the bytes given to SetRemote: after a commit or
// a fetch, the least recently used snapshots that are in the object store
// are evicted until it fits, except that a snapshot used (Commit, Verify,
// Path, Clone) in the last RecentUse (5 minutes) is never evicted, so a
// restore or resume that has just verified its snapshot does not lose its
// files halfway. The cache may exceed its budget while every snapshot in
// it is that recent.
package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/durable"
	"github.com/forkbox/forkbox/internal/errdefs"
)

const manifestName = "manifest.json"

// Store is a directory of snapshots, and with SetRemote an object store
// behind it (see remote.go).
type Store struct {
	dir string
	// leftovers are unfinished snapshots Open could not remove.
	leftovers []string
	r         remoteState
	v         marks // snapshots this process hashed and found whole (verified.go)
}

// Open opens (creating) the store at dir and removes unfinished snapshots:
// the temp dirs of snapshots being written, fetched or evicted by a process
// that is gone. One it cannot remove yet is not an error: a CRIU worker a
// killed daemon left may still be writing into it. RemoveLeftovers tries
// those again.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir, r: newRemoteState()}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp") { // .tmp-<id>, .tmp.evict-<id>
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				s.leftovers = append(s.leftovers, e.Name())
			}
		}
	}
	return s, nil
}

// RemoveLeftovers removes the unfinished snapshots Open could not (call it
// once the processes that wrote them are gone); it returns those it still
// cannot remove, with why.
func (s *Store) RemoveLeftovers() error {
	var errs []error
	for _, name := range s.leftovers {
		if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
			errs = append(errs, fmt.Errorf("remove unfinished snapshot %s: %w", name, err))
		}
	}
	s.leftovers = nil
	return errors.Join(errs...)
}

// Path is the directory of a committed snapshot. With a remote, asking for
// it counts as a use of the snapshot's cached copy (see the package doc).
func (s *Store) Path(id string) string {
	s.touchUse(id)
	return s.path(id)
}

func (s *Store) path(id string) string { return filepath.Join(s.dir, id) }

// Dir is the store's directory (with a remote, the local cache's).
func (s *Store) Dir() string { return s.dir }

// CheckRoom refuses (errdefs.ErrInsufficientStorage, naming the
// filesystem) a snapshot, what, whose files are estimated at need bytes
// when the store's filesystem has less free: called before the snapshot is
// taken, so that a sandbox is not paused for a snapshot that cannot fit.
func (s *Store) CheckRoom(what string, need int64) error {
	return diskspace.Check(s.dir, what, need)
}

// IDs lists the committed snapshots on disk.
func (s *Store) IDs() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Pending is a snapshot being written.
type Pending struct {
	s      *Store
	id     string
	dir    string
	shared map[string]sharedFile // by slash-separated path (Shared)
}

// Begin starts writing snapshot id into a temporary directory.
func (s *Store) Begin(id string) (*Pending, error) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return nil, errdefs.InvalidArgument("bad snapshot id %q", id)
	}
	if _, err := os.Stat(s.path(id)); err == nil {
		return nil, errdefs.Conflict("snapshot %s already exists", id)
	}
	dir := filepath.Join(s.dir, ".tmp-"+id)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	return &Pending{s: s, id: id, dir: dir}, nil
}

// ID is the snapshot's id.
func (p *Pending) ID() string { return p.id }

// Dir is where the snapshot's files are written.
func (p *Pending) Dir() string { return p.dir }

// Abort removes the pending snapshot.
func (p *Pending) Abort() error { return os.RemoveAll(p.dir) }

// Manifest lists a snapshot's files with their sha256.
type Manifest struct {
	Files     map[string]string `json:"files"`
	SizeBytes int64             `json:"size_bytes"`
	// With a remote only: the permission bits of the files and of the
	// directories (by slash-separated path, "." the snapshot's own), so a
	// snapshot fetched on another node has the modes it was taken with.
	Modes map[string]uint32 `json:"modes,omitempty"`
	Dirs  map[string]uint32 `json:"dirs,omitempty"`
	// Shared lists the files that are hard links to another snapshot's
	// (see Pending.Shared); SizeBytes does not count them, SharedBytes does.
	Shared      []string `json:"shared,omitempty"`
	SharedBytes int64    `json:"shared_bytes,omitempty"`
}

// Shared records that file rel of the pending snapshot is a hard link to a
// file of a committed, verified snapshot whose sha256 is sum: Commit takes
// the sum instead of hashing the file again (while the file's size, mtime
// and inode are still what they are now), and the snapshot's size counts
// it apart, as stored once for both snapshots.
func (p *Pending) Shared(rel, sum string) error {
	st, err := statStamp(filepath.Join(p.dir, filepath.FromSlash(rel)))
	if err != nil {
		return err
	}
	if p.shared == nil {
		p.shared = map[string]sharedFile{}
	}
	p.shared[filepath.ToSlash(rel)] = sharedFile{sum: sum, stamp: st}
	return nil
}

type sharedFile struct {
	sum   string
	stamp stamp
}

// LinkFile hard-links file rel (slash-separated, as in the manifest) of
// committed snapshot id to path to, after checking the snapshot against
// checksum (hashing it unless this process already has), and returns the
// file's sha256 for Pending.Shared. The link keeps the snapshot's mark
// valid, so linking does not make its next Verify hash it again.
func (s *Store) LinkFile(id, checksum, rel, to string) (string, error) {
	if !s.trusted(id, checksum) {
		if err := s.hashVerify(id, checksum); err != nil {
			return "", err
		}
	}
	files, err := s.Files(id)
	if err != nil {
		return "", err
	}
	sum, ok := files[rel]
	if !ok {
		return "", errdefs.NotFound("snapshot %s has no file %s", id, rel)
	}
	from := filepath.Join(s.path(id), filepath.FromSlash(rel))
	if err := os.Link(from, to); err != nil {
		return "", err
	}
	s.restamp(id, rel)
	return sum, nil
}

// Files returns a committed snapshot's files (slash-separated paths) with
// their sha256, as its manifest lists them. Verify the snapshot first when
// the sums must be right.
func (s *Store) Files(id string) (map[string]string, error) {
	m, err := s.readManifest(id)
	if err != nil {
		return nil, err
	}
	return m.Files, nil
}

// readManifest reads a committed snapshot's manifest (unverified).
func (s *Store) readManifest(id string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(s.path(id), manifestName))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errdefs.FailedPrecondition("snapshot %s is corrupt: unreadable manifest: %v", id, err)
	}
	return &m, nil
}

// Commit is CommitContext without a deadline.
func (p *Pending) Commit() (size int64, checksum string, err error) {
	return p.CommitContext(context.Background())
}

// CommitContext hashes and fsyncs every file, writes the manifest and moves
// the snapshot into place. With a remote, the files and then the manifest
// are uploaded before the move: a committed snapshot is durable in the
// object store. It returns the size on disk and the checksum of the
// manifest. On error the pending snapshot is left for Abort (and nothing
// of it is committed, locally or remotely).
func (p *Pending) CommitContext(ctx context.Context) (size int64, checksum string, err error) {
	size, checksum, err = p.commit(ctx)
	// The files are written; a full disk now is met by the manifest, a
	// file's fsync or a directory's.
	return size, checksum, diskspace.Map(err, p.s.dir, "snapshot "+p.id, 0)
}

func (p *Pending) commit(ctx context.Context) (size int64, checksum string, err error) {
	m := Manifest{Files: map[string]string{}}
	remote := p.s.remote() != nil
	var dirs []string
	err = filepath.WalkDir(p.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(p.dir, path)
		if d.IsDir() {
			dirs = append(dirs, path)
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("snapshot file %s is not a regular file", rel)
		}
		rel = filepath.ToSlash(rel)
		if sf, ok := p.shared[rel]; ok {
			if st, err := statStamp(path); err == nil && st.unchanged(sf.stamp) {
				m.Files[rel] = sf.sum
				m.Shared = append(m.Shared, rel)
				m.SharedBytes += int64(st.size)
				return nil
			}
		}
		sum, n, err := hashFile(path, true)
		if err != nil {
			return err
		}
		m.Files[rel] = sum
		m.SizeBytes += n
		return nil
	})
	if err != nil {
		return 0, "", err
	}
	if remote {
		if err := collectModes(p.dir, &m); err != nil {
			return 0, "", err
		}
	}
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return 0, "", err
	}
	if err := durable.WriteFile(filepath.Join(p.dir, manifestName), b, 0o600); err != nil {
		return 0, "", err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syncDir(dirs[i]); err != nil {
			return 0, "", err
		}
	}
	if remote {
		unlock := p.s.lockID(p.id)
		defer unlock()
		if err := p.s.upload(ctx, p.id, p.dir, &m, b); err != nil {
			return 0, "", err
		}
	}
	if err := os.Rename(p.dir, p.s.path(p.id)); err != nil {
		if remote {
			p.s.unpublish(p.id)
		}
		return 0, "", fmt.Errorf("commit snapshot %s: %w", p.id, err)
	}
	if err := syncDir(p.s.dir); err != nil {
		return 0, "", err
	}
	if remote {
		p.s.committed(p.id)
	}
	sum := sha256.Sum256(b)
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	p.s.remember(p.id, hex.EncodeToString(sum[:]), names, nil)
	return m.SizeBytes + int64(len(b)), hex.EncodeToString(sum[:]), nil
}

// Verify is VerifyContext without a deadline.
func (s *Store) Verify(id, checksum string) error {
	return s.VerifyContext(context.Background(), id, checksum)
}

// VerifyContext checks a committed snapshot against its manifest and the
// checksum recorded for it. A mismatch is a failed-precondition error
// naming the snapshot and the file. With a remote, a snapshot missing on
// disk is fetched first (and checked while it is written).
func (s *Store) VerifyContext(ctx context.Context, id, checksum string) error {
	s.touchUse(id)
	if s.remote() != nil {
		fetched, err := s.fetch(ctx, id, checksum)
		if err != nil {
			return err
		}
		if fetched { // checked file by file while it was written
			if names, err := manifestNames(s.path(id)); err == nil {
				s.remember(id, checksum, names, nil)
			}
			return nil
		}
	}
	if s.trusted(id, checksum) {
		return nil
	}
	return s.hashVerify(id, checksum)
}

// hashVerify hashes every file of snapshot id against its manifest and the
// manifest against checksum; a whole snapshot is remembered (verified.go).
func (s *Store) hashVerify(id, checksum string) error {
	dir := s.path(id)
	before, _ := manifestNames(dir)
	stamps := stampAll(dir, before)
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, os.ErrNotExist) {
		return errdefs.FailedPrecondition("snapshot %s is missing its files on disk", id)
	}
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	if checksum != "" && hex.EncodeToString(sum[:]) != checksum {
		return errdefs.FailedPrecondition("snapshot %s is corrupt: its manifest does not match the recorded checksum; refusing to restore it", id)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return errdefs.FailedPrecondition("snapshot %s is corrupt: unreadable manifest: %v", id, err)
	}
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		got, _, err := hashFile(filepath.Join(dir, filepath.FromSlash(n)), false)
		if err != nil {
			return errdefs.FailedPrecondition("snapshot %s is corrupt: %s: %v; refusing to restore it", id, n, err)
		}
		if got != m.Files[n] {
			return errdefs.FailedPrecondition("snapshot %s is corrupt: %s does not match its checksum; refusing to restore it", id, n)
		}
	}
	if stamps != nil && checksum != "" {
		s.remember(id, checksum, names, stamps)
	}
	return nil
}

// Clone commits snapshot dst made of the files of committed snapshot src
// that keep selects (by their slash-separated path in the manifest). The
// source is verified against its manifest and checksum first, so a corrupt
// one is refused rather than copied. Files are hard-linked (committed
// snapshot files are never written again, so sharing them is safe, and a
// later delete of either side leaves the other whole), or copied where a
// link is impossible. It returns the new snapshot's size and checksum; on
// error nothing of dst remains.
func (s *Store) Clone(src, srcChecksum, dst string, keep func(rel string) bool) (size int64, checksum string, err error) {
	return s.CloneContext(context.Background(), src, srcChecksum, dst, keep)
}

// CloneContext is Clone. With a remote, a source missing on disk is fetched
// first, and dst is uploaded (its files are the source's blobs, already
// there) before it is committed.
func (s *Store) CloneContext(ctx context.Context, src, srcChecksum, dst string, keep func(rel string) bool) (size int64, checksum string, err error) {
	if err := s.VerifyContext(ctx, src, srcChecksum); err != nil {
		return 0, "", err
	}
	// Links take no room but a directory's; a copy (where a link is
	// impossible) takes the source's.
	defer func() {
		if diskspace.IsFull(err) {
			var need int64
			if m, merr := s.readManifest(src); merr == nil {
				need = m.SizeBytes + m.SharedBytes
			}
			err = diskspace.Map(err, s.dir, "snapshot "+dst+" (from "+src+")", need)
		}
	}()
	// Keep src's cached copy while it is read.
	s.touchUse(src)
	remote := s.remote() != nil
	srcm, err := s.readManifest(src)
	if err != nil {
		return 0, "", err
	}
	p, err := s.Begin(dst)
	if err != nil {
		return 0, "", err
	}
	committed := false
	defer func() {
		if !committed {
			p.Abort()
		}
	}()
	m := Manifest{Files: map[string]string{}}
	dirs := map[string]bool{p.dir: true}
	for rel, sum := range srcm.Files {
		if !keep(rel) {
			continue
		}
		from := filepath.Join(s.path(src), filepath.FromSlash(rel))
		to := filepath.Join(p.dir, filepath.FromSlash(rel))
		if !strings.HasPrefix(to, p.dir+string(filepath.Separator)) {
			return 0, "", errdefs.FailedPrecondition("snapshot %s is corrupt: manifest names %q", src, rel)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
			return 0, "", err
		}
		for d := filepath.Dir(to); d != p.dir && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			// Keep the source's modes (a memory snapshot's CRIU dir is
			// searchable by the users of the restore).
			rel, _ := filepath.Rel(p.dir, d)
			if st, err := os.Stat(filepath.Join(s.path(src), rel)); err == nil {
				if err := os.Chmod(d, st.Mode().Perm()); err != nil {
					return 0, "", err
				}
			}
		}
		if err := os.Link(from, to); err != nil {
			if err := copyFile(from, to); err != nil {
				return 0, "", fmt.Errorf("clone snapshot %s: %w", src, err)
			}
		} else {
			s.restamp(src, rel) // our link, not a write: src stays trusted
		}
		st, err := os.Stat(to)
		if err != nil {
			return 0, "", err
		}
		m.Files[rel] = sum
		if slices.Contains(srcm.Shared, rel) {
			m.Shared = append(m.Shared, rel)
			m.SharedBytes += st.Size()
		} else {
			m.SizeBytes += st.Size()
		}
	}
	if len(m.Files) == 0 {
		return 0, "", errdefs.FailedPrecondition("snapshot %s has none of the files asked for", src)
	}
	if remote {
		if err := collectModes(p.dir, &m); err != nil {
			return 0, "", err
		}
	}
	mb, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return 0, "", err
	}
	if err := durable.WriteFile(filepath.Join(p.dir, manifestName), mb, 0o600); err != nil {
		return 0, "", err
	}
	list := make([]string, 0, len(dirs))
	for d := range dirs {
		list = append(list, d)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(list))) // children before parents
	for _, d := range list {
		if err := syncDir(d); err != nil {
			return 0, "", err
		}
	}
	if remote {
		unlock := s.lockID(dst)
		defer unlock()
		if err := s.upload(ctx, dst, p.dir, &m, mb); err != nil {
			return 0, "", err
		}
	}
	if err := os.Rename(p.dir, s.path(dst)); err != nil {
		if remote {
			s.unpublish(dst)
		}
		return 0, "", fmt.Errorf("commit snapshot %s: %w", dst, err)
	}
	committed = true
	if err := syncDir(s.dir); err != nil {
		return 0, "", err
	}
	if remote {
		s.committed(dst)
	}
	sum := sha256.Sum256(mb)
	return m.SizeBytes + int64(len(mb)), hex.EncodeToString(sum[:]), nil
}

// copyFile copies a file durably (for Clone where a hard link fails).
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Delete is DeleteContext without a deadline.
func (s *Store) Delete(id string) error { return s.DeleteContext(context.Background(), id) }

// DeleteContext removes a snapshot's files (idempotent): with a remote, its
// cached copy and its manifest in the object store (its blobs are left to
// GC: other snapshots may share them).
func (s *Store) DeleteContext(ctx context.Context, id string) error {
	if id == "" || strings.ContainsAny(id, "/.") {
		return errdefs.InvalidArgument("bad snapshot id %q", id)
	}
	s.forget(id)
	if s.remote() == nil {
		return os.RemoveAll(s.path(id))
	}
	unlock := s.lockID(id)
	defer unlock()
	if err := os.RemoveAll(s.path(id)); err != nil {
		return err
	}
	return s.deleteRemote(ctx, id)
}

// filesHashed counts hashFile's calls (tests read it: which Verify hashed).
var filesHashed atomic.Int64

func hashFile(path string, fsync bool) (string, int64, error) {
	filesHashed.Add(1)
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	if fsync {
		if err := f.Sync(); err != nil {
			return "", 0, err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func syncDir(dir string) error { return durable.SyncDir(dir) }
