package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
)

// Snapshotter is what snapshots need from the runtime beyond Runtime.
type Snapshotter interface {
	Freeze(ctx context.Context, id string) error
	Thaw(ctx context.Context, id string) error
	ExportFS(ctx context.Context, id, dst string) error
}

// fsArchive is the writable layer inside a snapshot.
const fsArchive = "fs.tar"

func snapshotView(sn *store.Snapshot) api.Snapshot {
	return api.Snapshot{ID: sn.ID, Type: sn.Type, Name: sn.Name, SandboxID: sn.SandboxID, ParentID: sn.ParentID,
		Image: sn.Image, SizeBytes: sn.SizeBytes, PausedMS: sn.PausedMS, CreatedAt: sn.CreatedAt}
}

// Checkpoint saves a running sandbox's state as a new snapshot; the sandbox
// keeps running. The snapshot is committed (files hashed, synced, renamed
// into place) before its record is written, and a failure at any step
// leaves no snapshot behind.
func (m *Manager) Checkpoint(ctx context.Context, ref string, req *api.CheckpointRequest) (*api.Snapshot, error) {
	typ := req.Type
	if typ == "" {
		typ = api.SnapshotFilesystem
	}
	if typ != api.SnapshotFilesystem && typ != api.SnapshotMemory {
		return nil, errdefs.InvalidArgument("type: %q is not filesystem or memory", req.Type)
	}
	if len(req.Name) > 128 {
		return nil, errdefs.InvalidArgument("name: at most 128 characters")
	}
	if m.snaps == nil {
		return nil, errdefs.Unavailable("snapshots are not configured on this daemon")
	}
	if typ == api.SnapshotMemory {
		return nil, errdefs.Unavailable("memory snapshots need CRIU, which this daemon does not have yet")
	}
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer release()
	sb, err := m.store.Get(ctx, l.id)
	if err != nil {
		return nil, err
	}
	// The snapshot must not be cut short by the client going away.
	ctx = context.WithoutCancel(ctx)
	id := newID("snap_")
	p, err := m.snaps.Begin(id)
	if err != nil {
		return nil, err
	}
	committed := false
	defer func() {
		if !committed {
			p.Abort()
		}
	}()
	paused, err := m.captureFS(ctx, l.id, filepath.Join(p.Dir(), fsArchive))
	if err != nil {
		return nil, err
	}
	size, sum, err := p.Commit()
	if err != nil {
		return nil, fmt.Errorf("commit snapshot: %w", err)
	}
	committed = true
	rec := &store.Snapshot{ID: id, Name: req.Name, Type: typ, SandboxID: sb.ID, ParentID: sb.SnapshotID, Image: sb.Image,
		Spec: sb.Spec, SizeBytes: size, Checksum: sum, PausedMS: paused.Milliseconds(), CreatedAt: m.now().UTC()}
	if err := m.store.CreateSnapshot(ctx, rec); err != nil {
		m.snaps.Delete(id)
		return nil, err
	}
	m.log.Info("snapshot taken", "snapshot", id, "sandbox", sb.ID, "type", typ, "bytes", size, "paused_ms", paused.Milliseconds())
	v := snapshotView(rec)
	return &v, nil
}

// captureFS freezes the sandbox, archives its writable layer, and thaws it.
func (m *Manager) captureFS(ctx context.Context, id, dst string) (time.Duration, error) {
	start := time.Now()
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.snapper.Freeze(fctx, id); err != nil {
		m.snapper.Thaw(ctx, id)
		return 0, fmt.Errorf("pause sandbox: %w", err)
	}
	err := m.snapper.ExportFS(ctx, id, dst)
	if terr := m.snapper.Thaw(ctx, id); terr != nil && err == nil {
		err = fmt.Errorf("resume sandbox: %w", terr)
	}
	return time.Since(start), err
}

// GetSnapshot returns one snapshot.
func (m *Manager) GetSnapshot(ctx context.Context, id string) (*api.Snapshot, error) {
	sn, err := m.store.GetSnapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	v := snapshotView(sn)
	return &v, nil
}

// ListSnapshots lists snapshots, newest first (of one sandbox when ref is set).
func (m *Manager) ListSnapshots(ctx context.Context, ref string) ([]api.Snapshot, error) {
	sandboxID := ""
	if ref != "" {
		sb, err := m.store.Get(ctx, ref)
		if err != nil {
			return nil, err
		}
		sandboxID = sb.ID
	}
	list, err := m.store.ListSnapshots(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	out := make([]api.Snapshot, 0, len(list))
	for _, sn := range list {
		out = append(out, snapshotView(sn))
	}
	return out, nil
}

// DeleteSnapshot deletes a snapshot and frees its space. Sandboxes restored
// from it are not affected (they hold their own copy).
func (m *Manager) DeleteSnapshot(ctx context.Context, id string) error {
	if _, err := m.store.GetSnapshot(ctx, id); err != nil {
		return err
	}
	// Record first: a crash in between leaves files without a record, which
	// the next start removes; never a record without files.
	if err := m.store.DeleteSnapshot(ctx, id); err != nil {
		return err
	}
	return m.snaps.Delete(id)
}

// restoreSource checks a create-from-snapshot request and returns the
// snapshot with the spec the new sandbox gets: the snapshot's, overridden by
// what the request sets.
func (m *Manager) restoreSource(ctx context.Context, req *api.CreateSandboxRequest, spec store.Spec) (*store.Snapshot, store.Spec, error) {
	sn, err := m.store.GetSnapshot(ctx, req.SnapshotID)
	if err != nil {
		return nil, spec, err
	}
	if req.Image != "" && req.Image != sn.Image {
		return nil, spec, errdefs.InvalidArgument("image: the snapshot sits on image %q; leave image empty", sn.Image)
	}
	out := sn.Spec
	out.Labels = spec.Labels
	out.AllowInternetAccess = spec.AllowInternetAccess
	out.Env = sn.Spec.Env
	for k, v := range spec.Env {
		if out.Env == nil {
			out.Env = map[string]string{}
		}
		out.Env[k] = v
	}
	if req.CPUs != nil {
		out.CPUs = spec.CPUs
	}
	if req.MemoryMB != nil {
		out.MemoryMB = spec.MemoryMB
	}
	if req.DiskMB != nil {
		out.DiskMB = spec.DiskMB
	}
	if req.PIDsLimit != nil {
		out.PIDsLimit = spec.PIDsLimit
	}
	if req.TimeoutSecs != nil {
		out.TimeoutSecs = spec.TimeoutSecs
	}
	out.MaxLifetimeSecs = spec.MaxLifetimeSecs
	if sn.Type == api.SnapshotFilesystem {
		st, err := os.Stat(filepath.Join(m.snaps.Path(sn.ID), fsArchive))
		if err != nil {
			return nil, spec, errdefs.FailedPrecondition("snapshot %s is missing its files on disk", sn.ID)
		}
		// ext4 metadata and the layer's own overhead need room too.
		need := st.Size() + 8<<20
		if out.DiskMB<<20 < need {
			return nil, spec, errdefs.InvalidArgument("disk_mb: %d is smaller than the snapshot's files (%d MB)", out.DiskMB, (need+(1<<20)-1)>>20)
		}
	}
	if err := m.snaps.Verify(sn.ID, sn.Checksum); err != nil {
		return nil, spec, err
	}
	return sn, out, nil
}

// snapshotFS is the path of a snapshot's writable-layer archive.
func (m *Manager) snapshotFS(id string) string {
	return filepath.Join(m.snaps.Path(id), fsArchive)
}

// reconcileSnapshots removes snapshot files that no record owns (a crash
// between committing files and writing the record, or during a delete).
func (m *Manager) reconcileSnapshots(ctx context.Context) error {
	if m.snaps == nil {
		return nil
	}
	ids, err := m.snaps.IDs()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := m.store.GetSnapshot(ctx, id); errors.Is(err, errdefs.ErrNotFound) {
			m.log.Warn("removing snapshot files with no record", "snapshot", id)
			m.snaps.Delete(id)
		}
	}
	return nil
}
