package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"os"
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
// base: a full memory snapshot (one that shares nothing itself) its memory
// descends from — the snapshot it was restored from, or that snapshot's
// own base, or the first full checkpoint of a sandbox that had none. After
// a dump, criu.DedupPages compares every page with the base's page at the
// same address and turns equal ones into references to the base's files,
// which are hard-linked into the new snapshot's criu/parent: the snapshot
// stores only what changed, stands alone (deleting the base loses nothing:
// the links keep the data), and restores with plain CRIU. A dump whose base
// is gone, unreadable or corrupt is kept whole; a base is never a snapshot
// that itself shares pages, so the chain is one level deep.

// memBaseFile, in a memory snapshot's CRIU directory, records the base the
// snapshot shares pages with (absent: it shares none).
const memBaseFile = "forkbox-base.json"

type memBaseRecord struct {
	Snapshot    string `json:"snapshot"`
	Pages       int64  `json:"pages"`
	SharedPages int64  `json:"shared_pages"`
}

// memBaseOf returns the base of a sandbox restored from memory snapshot
// snapID (whose CRIU images are criuDir): the snapshot's own base when it
// shares pages, else the snapshot itself.
func memBaseOf(snapID, criuDir string) string {
	b, err := os.ReadFile(filepath.Join(criuDir, memBaseFile))
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(criuDir); err != nil {
			return "" // not here (a cache that evicted it): unknown
		}
		return snapID
	}
	var rec memBaseRecord
	if err != nil || json.Unmarshal(b, &rec) != nil {
		return ""
	}
	return rec.Snapshot
}

// adoptedBase guesses the base of a sandbox adopted after a restart (which
// one it had is not kept): the base of the memory snapshot it was created
// from, if any. Any base gives correct snapshots (pages are compared); a
// wrong guess only shares fewer pages.
func (m *Manager) adoptedBase(ctx context.Context, sb *store.Sandbox) string {
	if sb.SnapshotID == "" || m.snaps == nil {
		return ""
	}
	sn, err := m.store.GetSnapshot(ctx, sb.SnapshotID)
	if err != nil || sn.Type != api.SnapshotMemory {
		return ""
	}
	return memBaseOf(sn.ID, filepath.Join(m.snaps.Path(sn.ID), criuDirName))
}

func (l *live) base() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.memBase
}

func (l *live) setBase(id string) {
	l.mu.Lock()
	l.memBase = id
	l.mu.Unlock()
}

// dedupMemory shares the pages of the memory snapshot being written into p
// with the sandbox's base (see above). The sandbox runs again meanwhile: this
// is not part of its pause. Only an error that leaves the images unusable
// is returned; anything else keeps the dump whole and is logged.
func (m *Manager) dedupMemory(ctx context.Context, l *live, p *snapshot.Pending) error {
	base := l.base()
	if base == "" {
		return nil
	}
	start := time.Now()
	sn, err := m.store.GetSnapshot(ctx, base)
	if err != nil {
		if !errors.Is(err, errdefs.ErrNotFound) {
			m.log.Warn("memory snapshot kept whole: base unreadable", "sandbox", l.id, "base", base, "err", err)
		}
		l.setBase("") // deleted: the next full checkpoint becomes the base
		return nil
	}
	if err := m.snaps.VerifyContext(ctx, base, sn.Checksum); err != nil {
		m.log.Warn("memory snapshot kept whole: base failed verification", "sandbox", l.id, "base", base, "err", err)
		return nil
	}
	dir := filepath.Join(p.Dir(), criuDirName)
	sums := map[string]string{}
	st, err := criu.DedupPages(dir, filepath.Join(m.snaps.Path(base), criuDirName), func(name, to string) error {
		sum, err := m.snaps.LinkFile(base, sn.Checksum, criuDirName+"/"+name, to)
		sums[name] = sum
		return err
	})
	if errors.Is(err, criu.ErrImagesDamaged) {
		return err
	}
	if err != nil {
		m.log.Warn("memory snapshot kept whole: pages not deduplicated", "sandbox", l.id, "base", base, "err", err)
		return nil
	}
	if st.Shared == 0 {
		return nil
	}
	for _, name := range st.Linked {
		if err := p.Shared(criuDirName+"/"+criu.ParentDir+"/"+name, sums[name]); err != nil {
			return err
		}
	}
	rec, _ := json.Marshal(memBaseRecord{Snapshot: base, Pages: st.Pages, SharedPages: st.Shared})
	if err := durable.WriteFile(filepath.Join(dir, memBaseFile), rec, 0o644); err != nil {
		return err
	}
	m.log.Debug("memory snapshot shares pages with its base", "sandbox", l.id, "base", base,
		"pages", st.Pages, "shared", st.Shared, "ms", time.Since(start).Milliseconds())
	return nil
}
