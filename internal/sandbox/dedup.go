package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/criu"
	"github.com/forkbox/forkbox/internal/durable"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/snapshot"
	"github.com/forkbox/forkbox/internal/store"
)

// Memory snapshots share pages with their base.
//
// A sandbox restored from a memory snapshot starts with memory that is,
// page for page, the snapshot's; a later memory snapshot or suspend image
// of it differs only where the session wrote. So each live sandbox has a
// base: the page images of a full dump its memory descends from, inside a
// snapshot that exists — the CRIU images of the snapshot it was restored
// (or resumed) from, or, when that snapshot itself shares pages, the base
// images it holds in criu/parent; a sandbox with none gets its first
// memory checkpoint. After a dump, criu.DedupPages compares every page with
// the base's page at the same address and turns equal ones into references
// to the base's files, which are hard-linked into the new snapshot's
// criu/parent: the snapshot stores only what changed, stands alone
// (deleting the base's snapshot loses nothing: the links keep the data),
// and restores with plain CRIU. Pages are compared, so any base is correct;
// a base is always a full dump, so the chain is one level deep.
//
// A session that suspends and resumes again and again keeps sharing: it
// resumes from its suspend image, which the next suspend dumps against
// (the image is dropped only once the next one is committed), linking the
// same base files forward. A dump that would share less than
// minSharedFraction of its pages is kept whole instead and becomes the base
// of the next, so a session that drifted from its base rebases itself. A
// dump whose base is gone, unreadable or corrupt is kept whole too.

// memBaseFile, in a memory snapshot's CRIU directory, records what the
// snapshot shares pages with (absent: it shares none). Informational: the
// files under criu/parent are what a restore reads.
const memBaseFile = "forkbox-base.json"

// minSharedFraction: below it a dump is kept whole (see above).
const minSharedFraction = 0.5

type memBaseRecord struct {
	Snapshot    string `json:"snapshot"` // whose files were linked
	Dir         string `json:"dir"`      // from which directory of it
	Pages       int64  `json:"pages"`
	SharedPages int64  `json:"shared_pages"`
}

// memBase is where a live sandbox's base images are: a directory (slash-
// separated, "criu" or "criu/parent") of a snapshot.
type memBase struct {
	snapshot, dir string
}

// baseIn returns the base that a sandbox restored from memory snapshot
// snapID (whose CRIU images are criuDir) has: the images the snapshot
// shares pages with, else its own. None when the files are not here (a
// cache that evicted them).
func baseIn(snapID, criuDir string) memBase {
	if _, err := os.Stat(filepath.Join(criuDir, criu.ParentDir)); err == nil {
		return memBase{snapID, criuDirName + "/" + criu.ParentDir}
	}
	if _, err := os.Stat(criuDir); err != nil {
		return memBase{}
	}
	return memBase{snapID, criuDirName}
}

// adoptedBase finds a base for a sandbox adopted after a restart (which one
// it had is not kept): the suspend image it last resumed from, else the
// memory snapshot it was created from. A wrong guess only shares fewer
// pages.
func (m *Manager) adoptedBase(ctx context.Context, sb *store.Sandbox) memBase {
	if m.snaps == nil {
		return memBase{}
	}
	for _, id := range []string{sb.SuspendImage, sb.SnapshotID} {
		if id == "" {
			continue
		}
		sn, err := m.store.GetSnapshot(ctx, id)
		if err != nil || (sn.Type != api.SnapshotMemory && sn.Type != snapshotSuspend) {
			continue
		}
		if b := baseIn(sn.ID, filepath.Join(m.snaps.Path(sn.ID), criuDirName)); b.snapshot != "" {
			return b
		}
	}
	return memBase{}
}

func (l *live) base() memBase {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.memBase
}

func (l *live) setBase(b memBase) {
	l.mu.Lock()
	l.memBase = b
	l.mu.Unlock()
}

// dedupMemory shares the pages of the memory snapshot being written into p
// (id) with the sandbox's base (see above), and makes a whole dump the
// sandbox's next base. The sandbox runs again meanwhile: this is not part
// of its pause. Only an error that leaves the images unusable is returned;
// anything else keeps the dump whole and is logged.
func (m *Manager) dedupMemory(ctx context.Context, l *live, p *snapshot.Pending, id string) error {
	base := l.base()
	shared, err := m.sharePages(ctx, l, p, base)
	if err != nil {
		return err
	}
	if !shared {
		// Whole: the next dump shares with this one (once committed;
		// until then, and if it never is, that finds no snapshot).
		l.setBase(memBase{id, criuDirName})
	}
	return nil
}

// sharePages does dedupMemory's work and reports whether the dump now
// shares pages with base.
func (m *Manager) sharePages(ctx context.Context, l *live, p *snapshot.Pending, base memBase) (bool, error) {
	if base.snapshot == "" {
		return false, nil
	}
	start := time.Now()
	sn, err := m.store.GetSnapshot(ctx, base.snapshot)
	if err != nil {
		if !errors.Is(err, errdefs.ErrNotFound) { // deleted: nothing to say
			m.log.Warn("memory snapshot kept whole: base unreadable", "sandbox", l.id, "base", base.snapshot, "err", err)
		}
		return false, nil
	}
	if err := m.snaps.VerifyContext(ctx, base.snapshot, sn.Checksum); err != nil {
		m.log.Warn("memory snapshot kept whole: base failed verification", "sandbox", l.id, "base", base.snapshot, "err", err)
		return false, nil
	}
	dir := filepath.Join(p.Dir(), criuDirName)
	sums := map[string]string{}
	st, err := criu.DedupPages(dir, filepath.Join(m.snaps.Path(base.snapshot), filepath.FromSlash(base.dir)), minSharedFraction,
		func(name, to string) error {
			sum, err := m.snaps.LinkFile(base.snapshot, sn.Checksum, path.Join(base.dir, name), to)
			sums[name] = sum
			return err
		})
	if errors.Is(err, criu.ErrImagesDamaged) {
		return false, err
	}
	if err != nil {
		m.log.Warn("memory snapshot kept whole: pages not deduplicated", "sandbox", l.id, "base", base.snapshot, "err", err)
		return false, nil
	}
	if st.Shared == 0 {
		m.log.Debug("memory snapshot kept whole: too little in common with its base", "sandbox", l.id, "base", base.snapshot,
			"pages", st.Pages, "ms", time.Since(start).Milliseconds())
		return false, nil
	}
	for _, name := range st.Linked {
		if err := p.Shared(criuDirName+"/"+criu.ParentDir+"/"+name, sums[name]); err != nil {
			return false, err
		}
	}
	rec, _ := json.Marshal(memBaseRecord{Snapshot: base.snapshot, Dir: base.dir, Pages: st.Pages, SharedPages: st.Shared})
	if err := durable.WriteFile(filepath.Join(dir, memBaseFile), rec, 0o644); err != nil {
		return false, err
	}
	m.log.Debug("memory snapshot shares pages with its base", "sandbox", l.id, "base", base.snapshot,
		"pages", st.Pages, "shared", st.Shared, "ms", time.Since(start).Milliseconds())
	return true, nil
}
