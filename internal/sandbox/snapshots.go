package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/criu"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/snapshot"
	"github.com/forkbox/forkbox/internal/store"
)

// Snapshotter is what snapshots need from the runtime beyond Runtime.
type Snapshotter interface {
	Freeze(ctx context.Context, id string) error
	Thaw(ctx context.Context, id string) error
	ExportFS(ctx context.Context, id, dst string) error
	CheckpointMemory(ctx context.Context, h *criu.Host, id string, info *runtime.Info, img *image.Image, dir string) error
	RestoreMemory(ctx context.Context, h *criu.Host, spec runtime.Spec, criuDir string) (*runtime.Info, error)
}

// criuDirName holds the CRIU images inside a memory snapshot.
const criuDirName = "criu"

// fsArchive is the writable layer inside a snapshot.
const fsArchive = "fs.tar"

func snapshotView(sn *store.Snapshot) api.Snapshot {
	return api.Snapshot{ID: sn.ID, Type: sn.Type, Name: sn.Name, SandboxID: sn.SandboxID, ParentID: sn.ParentID,
		Image: displayImage(sn.Image), SizeBytes: sn.SizeBytes, PausedMS: sn.PausedMS, CreatedAt: sn.CreatedAt}
}

// Checkpoint saves a sandbox's state as a new snapshot.
//
// A running sandbox keeps running: it is paused for the moment of the
// capture. A suspended sandbox stays suspended: the snapshot is made from
// its suspend image (which holds its files and, for a memory snapshot, its
// processes), without resuming it. A sandbox in the middle of a suspend or
// resume is checkpointed once that ends (within the lock-wait ceiling);
// any other state is a failed precondition.
//
// The snapshot is committed (files hashed, synced, renamed into place)
// before its record is written, and a failure at any step, a panic
// included, leaves no snapshot behind.
func (m *Manager) Checkpoint(ctx context.Context, ref string, req *api.CheckpointRequest) (*api.Snapshot, error) {
	return m.checkpoint(ctx, ref, req, newID("snap_"))
}

// checkpoint is Checkpoint into a snapshot of the given id.
func (m *Manager) checkpoint(ctx context.Context, ref string, req *api.CheckpointRequest, id string) (_ *api.Snapshot, err error) {
	typ := req.Type
	if typ == "" {
		typ = api.SnapshotFilesystem
	}
	if !typ.Valid() {
		return nil, errdefs.InvalidArgument("type: %q is not filesystem or memory", req.Type)
	}
	if len(req.Name) > 128 {
		return nil, errdefs.InvalidArgument("name: at most 128 characters")
	}
	if m.snaps == nil {
		return nil, errdefs.Unavailable("snapshots are not configured on this daemon")
	}
	if h, problem := m.criuHost(); typ == api.SnapshotMemory && h == nil {
		return nil, errdefs.Unavailable("memory snapshots are unavailable on this host: %s", problem)
	}
	sb, err := m.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	if q, err := m.quotas(ctx, sb.Tenant); err != nil {
		return nil, err
	} else if err := m.checkSnapshotQuota(ctx, sb.Tenant, q); err != nil {
		return nil, err
	}
	// The snapshot must not be cut short by the client going away (lockOp's
	// context is not), but a delete of the sandbox cancels it.
	ctx, unlock, err := m.lockOp(ctx, sb.ID, "checkpoint", lockOpts{})
	if err != nil {
		return nil, err
	}
	defer unlock()
	// A delete cancels what holds the lock: whatever error that causes,
	// the delete is the answer.
	defer func() { err = opErr(ctx, err) }()
	if sb, err = m.store.Get(ctx, sb.ID); err != nil {
		return nil, err
	}
	if err := hookPoint(ctx, "checkpoint:locked", sb.ID, sb.Name); err != nil {
		return nil, opErr(ctx, err)
	}
	var capture func(p *snapshot.Pending) (time.Duration, error)
	var l *live
	switch sb.State {
	case api.StateRunning:
		if err := m.checkSnapshotRoom(sb.ID, typ == api.SnapshotMemory, false); err != nil {
			return nil, err
		}
		var release func()
		l, release, err = m.acquireExclusive(ctx, sb.ID, "checkpoint")
		if err != nil {
			return nil, err
		}
		defer release()
		capture = func(p *snapshot.Pending) (time.Duration, error) {
			if typ == api.SnapshotMemory {
				return m.captureMemory(ctx, l, sb, p)
			}
			return m.captureFS(ctx, l.id, filepath.Join(p.Dir(), fsArchive), nil)
		}
	case api.StateSuspended:
		return m.checkpointSuspended(ctx, sb, typ, req.Name, id)
	default:
		return nil, errdefs.FailedPrecondition("sandbox %s is %s; only a running or suspended sandbox can be checkpointed", sb.ID, sb.State)
	}
	m.metrics.snapshots.WithLabelValues(string(typ)).Inc()
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
	paused, err := capture(p)
	if err != nil {
		return nil, opErr(ctx, m.snapshotSpaceErr(err, sb.ID, typ == api.SnapshotMemory, false))
	}
	if err := hookPoint(ctx, "checkpoint:captured", sb.ID, sb.Name); err != nil {
		return nil, opErr(ctx, err)
	}
	size, sum, err := p.CommitContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("commit snapshot: %w", err)
	}
	committed = true
	rec := &store.Snapshot{ID: id, Tenant: sb.Tenant, Name: req.Name, Type: typ, SandboxID: sb.ID, ParentID: sb.SnapshotID, Image: sb.Image,
		Spec: sb.Spec, SizeBytes: size, Checksum: sum, PausedMS: paused.Milliseconds(), CreatedAt: m.now().UTC()}
	if err := m.recordSnapshot(ctx, rec); err != nil {
		return nil, err
	}
	m.log.Info("snapshot taken", "snapshot", id, "sandbox", sb.ID, "type", typ, "bytes", size, "paused_ms", paused.Milliseconds())
	v := snapshotView(rec)
	return &v, nil
}

// recordSnapshot writes the record of committed snapshot files, and removes
// the files if that fails (on every path: a record never lacks its files,
// and files without a record are removed at the next start anyway).
func (m *Manager) recordSnapshot(ctx context.Context, rec *store.Snapshot) error {
	recorded := false
	defer func() {
		if !recorded {
			m.snaps.Delete(rec.ID)
		}
	}()
	if err := m.store.CreateSnapshot(context.WithoutCancel(ctx), rec); err != nil {
		return err
	}
	recorded = true
	return nil
}

// checkpointSuspended makes a snapshot of a suspended sandbox from its
// suspend image: a memory snapshot shares the image's files (hard links,
// so it costs no copy and no pause), a filesystem snapshot its writable
// layer. The image is verified first, so a corrupt one is not blessed.
func (m *Manager) checkpointSuspended(ctx context.Context, sb *store.Sandbox, typ api.SnapshotType, name, id string) (*api.Snapshot, error) {
	src, err := m.store.GetSnapshot(ctx, sb.SuspendImage)
	if err != nil {
		return nil, fmt.Errorf("suspend image of %s: %w", sb.ID, err)
	}
	m.metrics.snapshots.WithLabelValues(string(typ)).Inc()
	keep := func(string) bool { return true }
	if typ == api.SnapshotFilesystem {
		keep = func(rel string) bool { return rel == fsArchive }
	}
	size, sum, err := m.snaps.CloneContext(ctx, src.ID, src.Checksum, id, keep)
	if err != nil {
		return nil, opErr(ctx, err)
	}
	rec := &store.Snapshot{ID: id, Tenant: sb.Tenant, Name: name, Type: typ, SandboxID: sb.ID, ParentID: sb.SnapshotID, Image: sb.Image,
		Spec: sb.Spec, SizeBytes: size, Checksum: sum, CreatedAt: m.now().UTC()}
	if err := m.recordSnapshot(ctx, rec); err != nil {
		return nil, err
	}
	m.log.Info("snapshot taken from a suspend image", "snapshot", id, "sandbox", sb.ID, "type", typ, "bytes", size)
	v := snapshotView(rec)
	return &v, nil
}

// captureFS freezes the sandbox, archives its writable layer, runs also
// (when set) while still frozen, and thaws it on every way out. It returns
// how long the sandbox was paused.
func (m *Manager) captureFS(ctx context.Context, id, dst string, also func() error) (paused time.Duration, err error) {
	start := time.Now()
	defer func() {
		// Thaw even when the operation was cancelled or panicked: a frozen
		// sandbox would answer nothing.
		if terr := m.snapper.Thaw(context.WithoutCancel(ctx), id); terr != nil && err == nil {
			err = fmt.Errorf("resume sandbox: %w", terr)
		}
		paused = time.Since(start)
	}()
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.snapper.Freeze(fctx, id); err != nil {
		return 0, fmt.Errorf("pause sandbox: %w", err)
	}
	if err := hookPoint(ctx, "checkpoint:frozen", id, ""); err != nil {
		return 0, err
	}
	if err := m.snapper.ExportFS(ctx, id, dst); err != nil {
		return 0, err
	}
	if also != nil {
		return 0, also()
	}
	return 0, nil
}

// quiesceWait bounds the wait, before each dump attempt, for the agent to
// close its end of the daemon's connections (an agent whose sandbox's CPUs
// are busy closes them late).
const quiesceWait = 3 * time.Second

// captureMemory takes a memory snapshot into dir: the writable layer and,
// in the same frozen moment, every process with CRIU. The daemon holds no
// connection into the sandbox meanwhile (acquireExclusive waited for the
// calls in flight and keeps new ones out).
func (m *Manager) captureMemory(ctx context.Context, l *live, sb *store.Sandbox, p *snapshot.Pending) (time.Duration, error) {
	dir := p.Dir()
	img, err := m.images.Get(ctx, sb.Image)
	if err != nil {
		return 0, fmt.Errorf("image of the sandbox: %w", err)
	}
	criuDir := filepath.Join(dir, criuDirName)
	var paused time.Duration
	for attempt := 1; ; attempt++ {
		if !l.agent.Quiesce(ctx, quiesceWait) {
			m.log.Debug("checkpoint: the agent has not closed every connection yet", "sandbox", l.id, "attempt", attempt)
		}
		if err := os.RemoveAll(criuDir); err != nil {
			return 0, err
		}
		// Searchable by all: CRIU's restored tasks read some of their
		// images through CRIU's descriptor of this dir from inside the
		// sandbox's user namespace, as the sandbox's users. The snapshot's
		// own dir (0700, root's) keeps every host account out.
		if err := os.Mkdir(criuDir, 0o755); err != nil {
			return 0, err
		}
		if err := os.Chmod(criuDir, 0o755); err != nil {
			return 0, err
		}
		paused, err = m.captureFS(ctx, l.id, filepath.Join(dir, fsArchive), func() error {
			h, _ := m.criuHost()
			return m.snapper.CheckpointMemory(ctx, h, l.id, l.info, img, criuDir)
		})
		// A connection the agent had not closed within quiesceWait, or one
		// a call handed back after the wait, fails the dump: try again.
		// The pauses add up past half a second: when a handler answered
		// without reading its whole request body, Go's HTTP server shuts
		// down its writing half (the daemon sees EOF) and keeps the
		// socket for another 500 ms before closing it.
		if err != nil && attempt < 4 && ctx.Err() == nil && strings.Contains(err.Error(), "Unix socket") {
			m.log.Debug("checkpoint met a closing agent connection; retrying", "sandbox", l.id, "attempt", attempt)
			time.Sleep(time.Duration(attempt) * 250 * time.Millisecond)
			continue
		}
		if err != nil && ctx.Err() == nil && strings.Contains(err.Error(), "Unix socket") {
			// Transient (an agent starved of CPU), not the sandbox's fault.
			return paused, errdefs.Unavailable("the sandbox's agent kept a connection open through %d attempts; try again: %v", attempt, err)
		}
		if err != nil {
			return paused, err
		}
		break
	}
	// CRIU's log is not part of the snapshot's content.
	os.Remove(filepath.Join(criuDir, "dump.log"))
	return paused, m.dedupMemory(ctx, l, p, p.ID())
}

// GetSnapshot returns one snapshot.
func (m *Manager) GetSnapshot(ctx context.Context, id string) (*api.Snapshot, error) {
	sn, err := m.store.GetSnapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	if sn.Type == snapshotSuspend {
		return nil, errdefs.NotFound("snapshot %q not found", id)
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
		if sn.Type != snapshotSuspend { // a sandbox's own suspend images are not listed
			out = append(out, snapshotView(sn))
		}
	}
	return out, nil
}

// DeleteSnapshot deletes a snapshot and frees its space. Sandboxes restored
// from it are not affected (they hold their own copy).
func (m *Manager) DeleteSnapshot(ctx context.Context, id string) error {
	if _, err := m.GetSnapshot(ctx, id); err != nil {
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
func (m *Manager) restoreSource(ctx context.Context, req *api.CreateSandboxRequest, spec store.Spec, verified bool) (*store.Snapshot, store.Spec, error) {
	sn, err := m.store.GetSnapshot(ctx, req.SnapshotID)
	if err != nil {
		return nil, spec, err
	}
	if sn.Type == snapshotSuspend {
		return nil, spec, errdefs.NotFound("snapshot %q not found", req.SnapshotID)
	}
	if req.Image != "" && req.Image != displayImage(sn.Image) {
		return nil, spec, errdefs.InvalidArgument("image: the snapshot sits on image %q; leave image empty", displayImage(sn.Image))
	}
	out := sn.Spec
	out.Labels = spec.Labels
	out.Ports = nil // a new sandbox: its ports get tokens of their own
	if out.E2B != nil {
		// And its E2B data plane tokens too; E2B's default code contexts
		// are in the snapshot (their kernels with their variables).
		out.E2B = &store.E2BAccess{Template: out.E2B.Template, Contexts: maps.Clone(out.E2B.Contexts)}
	}
	out.SuspendOnIdle = spec.SuspendOnIdle
	out.AllowInternetAccess = spec.AllowInternetAccess
	// The snapshot's egress policy carries over unless the request gives
	// one; without internet access there is none.
	if req.Network != nil || !out.AllowInternetAccess {
		out.Network = spec.Network
	}
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
	out.UIDBase = sn.Spec.UIDBase
	// Verified first: with snapshots in object storage, that is also what
	// brings them to this node.
	if !verified {
		if err := m.snaps.VerifyContext(ctx, sn.ID, sn.Checksum); err != nil {
			return nil, spec, err
		}
	}
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

// Fork takes a memory snapshot of a running sandbox and restores it count
// times; the branches and the source then diverge independently.
func (m *Manager) Fork(ctx context.Context, ref string, req *api.ForkRequest) (*api.ForkResult, error) {
	if req.Count < 1 || req.Count > m.maxFork {
		return nil, rangeErr("count", req.Count, 1, m.maxFork)
	}
	if len(req.Names) > 0 && len(req.Names) != req.Count {
		return nil, errdefs.InvalidArgument("names: %d names for %d branches", len(req.Names), req.Count)
	}
	seen := map[string]bool{}
	for _, n := range req.Names {
		if !nameRE.MatchString(n) || seen[n] {
			return nil, errdefs.InvalidArgument("names: %q is not a valid, distinct sandbox name", n)
		}
		seen[n] = true
	}
	if err := checkNetwork(req.Network, true); err != nil {
		return nil, err
	}
	if req.Network != nil {
		src, err := m.store.Get(ctx, ref)
		if err != nil {
			return nil, err
		}
		if err := checkNetwork(req.Network, src.Spec.AllowInternetAccess); err != nil {
			return nil, err
		}
	}
	src, err := m.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := m.checkForkQuota(ctx, src, req.Count); err != nil {
		return nil, err
	}
	// A fork is all or nothing. Its snapshot is marked until the fork has
	// answered, so that a daemon that dies before then is undone at the
	// next start (collectForks): the branches ended, the snapshot whose id
	// the caller never learnt deleted.
	if m.snaps == nil {
		return nil, errdefs.Unavailable("snapshots are not configured on this daemon")
	}
	snapID := newID("snap_")
	if err := m.snaps.MarkIntent(forkIntent, snapID); err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	defer func() {
		if err := m.snaps.ClearIntent(forkIntent, snapID); err != nil {
			m.log.Warn("clear a fork's mark", "snapshot", snapID, "err", err)
		}
	}()
	sn, err := m.checkpoint(ctx, ref, &api.CheckpointRequest{Type: api.SnapshotMemory, Name: "fork"}, snapID)
	if err != nil {
		return nil, err
	}
	if err := hookPoint(ctx, "fork:snapshotted", src.ID, src.Name); err != nil {
		return nil, err
	}
	// The branches restore the same files: they are checked against their
	// checksum once here, not once per branch (each check re-reads and
	// hashes the whole snapshot, ~100 ms of CPU for a 112 MiB kernel).
	rec, err := m.store.GetSnapshot(ctx, sn.ID)
	if err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	if err := m.snaps.VerifyContext(ctx, rec.ID, rec.Checksum); err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	res := &api.ForkResult{Snapshot: *sn, Sandboxes: make([]api.Sandbox, req.Count)}
	errs := make([]error, req.Count)
	var wg sync.WaitGroup
	for i := 0; i < req.Count; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// A panic in one branch fails the fork (and is logged with its
			// stack) rather than the whole daemon.
			defer recoverTo(m.log, &errs[i], "fork branch")
			// Branches keep the source's internet access, and its
			// egress policy unless the fork gives one.
			creq := &api.CreateSandboxRequest{SnapshotID: sn.ID, AllowInternetAccess: rec.Spec.AllowInternetAccess, Network: req.Network}
			if len(req.Names) > 0 {
				creq.Name = req.Names[i]
			}
			sb, err := m.create(ctx, creq, createOpts{verified: true})
			if err != nil {
				errs[i] = err
				return
			}
			res.Sandboxes[i] = *sb
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// All or nothing: remove the branches that did start, and the
		// snapshot taken for them (the caller never learns its id).
		for _, sb := range res.Sandboxes {
			if sb.ID != "" {
				m.Delete(context.WithoutCancel(ctx), sb.ID)
			}
		}
		if derr := m.DeleteSnapshot(context.WithoutCancel(ctx), sn.ID); derr != nil {
			m.log.Warn("remove the snapshot of a failed fork", "snapshot", sn.ID, "err", derr)
		}
		return nil, fmt.Errorf("fork: %w", err)
	}
	if err := hookPoint(ctx, "fork:branched", src.ID, src.Name); err != nil {
		return nil, err
	}
	return res, nil
}
