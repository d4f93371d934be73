package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
)

// Suspend and resume (docs/ARCHITECTURE.md, "States and transitions"): a suspend is a memory snapshot of the
// sandbox (its "suspend image", a snapshot of type suspend that the API does
// not list) followed by freeing every process, mount and cgroup; a resume is
// a restore of that image under the same id and name. Each step is recorded
// before the next, so a daemon that dies midway finds on restart either a
// sandbox still running (the suspend had not freed it yet) or a suspended one
// with a complete image:
//
//	running → suspending → (image committed, processes freed) → suspended
//	suspended → resuming → (restored, agent answers) → running
//
// Only the latest suspend image of a sandbox is kept.

// reasonIdle is the reason of suspends (and terminations) by the reaper.
const reasonIdle = "idle timeout"

// snapshotSuspend marks a suspend image among the snapshots: a type of the
// store's records only, never one the API shows (api.SnapshotType.Valid is
// false for it).
const snapshotSuspend api.SnapshotType = "suspend"

// Suspend saves a running sandbox to disk and frees its CPU and memory.
// Every way out of it, a panic or a delete's cancellation included, leaves
// the sandbox in a state that holds: still running (and its new image
// dropped) until its processes are freed, suspended with its new image from
// then on.
func (m *Manager) Suspend(ctx context.Context, ref, reason string) (_ *api.Sandbox, err error) {
	if h, problem := m.criuHost(); h == nil {
		return nil, errdefs.Unavailable("suspend needs memory snapshots, unavailable on this host: %s", problem)
	}
	sb, err := m.store.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	o := lockOpts{}
	if reason == reasonIdle {
		o.Wait = -1 // the reaper does not queue: it tries again at its next tick
	}
	ctx, unlock, err := m.lockOp(ctx, sb.ID, "suspend", o)
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
	if sb.State != api.StateRunning {
		return nil, errdefs.FailedPrecondition("sandbox %s is %s; only a running sandbox can be suspended", sb.ID, sb.State)
	}
	// An idle suspend, or one at the daemon's exit, frees what the sandbox
	// holds: it is not refused.
	if reason != reasonIdle && reason != reasonShutdown {
		if err := m.checkSuspendQuota(ctx, sb.Tenant); err != nil {
			return nil, err
		}
	}
	if err := m.checkSnapshotRoom(sb.ID, true, true); err != nil {
		return nil, err
	}
	l, release, err := m.acquireExclusive(ctx, sb.ID, "suspend")
	if err != nil {
		return nil, err
	}
	defer release()
	if reason == reasonIdle {
		// Calls that ran while this suspend waited make it no longer idle.
		l.mu.Lock()
		active := m.now().Sub(l.lastActive) < l.timeout
		l.mu.Unlock()
		if active {
			return m.view(sb), nil
		}
	}
	if _, err := m.setState(ctx, sb.ID, api.StateSuspending, reason, nil); err != nil {
		return nil, err
	}
	const (
		running = iota // processes alive, no image recorded
		imaged         // processes alive, image recorded
		freeing        // untracked; processes being freed
		done
	)
	stage, img, failure := running, "", "interrupted by an internal error"
	id := sb.ID // sb is reassigned below, and nil when that fails
	defer func() {
		bg := context.WithoutCancel(ctx)
		switch stage {
		case running, imaged:
			m.setState(bg, id, api.StateRunning, "suspend failed: "+failure, nil)
			if img != "" {
				m.dropSnapshot(bg, img)
			}
		case freeing:
			if err := m.rt.Destroy(bg, id, l.info); err != nil {
				m.log.Error("free suspended sandbox", "sandbox", id, "err", err)
			}
			m.setState(bg, id, api.StateSuspended, reason, func(s *store.Sandbox) { s.SuspendImage, s.Runtime = img, nil })
		}
	}()
	fail := func(err error) (*api.Sandbox, error) {
		err = opErr(ctx, err)
		failure = err.Error()
		return nil, fmt.Errorf("suspend: %w", err)
	}
	if err := hookPoint(ctx, "suspend:recorded", sb.ID, sb.Name); err != nil {
		return fail(err)
	}
	start := time.Now()
	if img, err = m.takeSuspendImage(ctx, l, sb); err != nil {
		return fail(err)
	}
	stage = imaged
	if err := hookPoint(ctx, "suspend:imaged", sb.ID, sb.Name); err != nil {
		return fail(err)
	}
	stage = freeing
	m.untrack(sb.ID)
	if err := m.rt.Destroy(ctx, sb.ID, l.info); err != nil {
		m.log.Error("free suspended sandbox", "sandbox", sb.ID, "err", err)
	}
	if err := hookPoint(ctx, "suspend:freed", sb.ID, sb.Name); err != nil {
		return fail(err)
	}
	old := sb.SuspendImage
	suspended, err := m.setState(ctx, id, api.StateSuspended, reason, func(s *store.Sandbox) {
		s.SuspendImage = img
		s.Runtime = nil
	})
	if err != nil {
		return fail(err)
	}
	sb = suspended
	stage = done
	if old != "" && old != img {
		m.dropSnapshot(ctx, old)
	}
	m.log.Info("sandbox suspended", "sandbox", sb.ID, "reason", reason, "ms", time.Since(start).Milliseconds())
	return m.view(sb), nil
}

// takeSuspendImage writes and records a suspend image of a running sandbox.
func (m *Manager) takeSuspendImage(ctx context.Context, l *live, sb *store.Sandbox) (string, error) {
	id := newID("snap_")
	p, err := m.snaps.Begin(id)
	if err != nil {
		return "", err
	}
	committed := false
	defer func() {
		if !committed {
			p.Abort()
		}
	}()
	paused, err := m.captureMemory(ctx, l, sb, p)
	if err != nil {
		return "", m.snapshotSpaceErr(err, sb.ID, true, true)
	}
	size, sum, err := p.CommitContext(ctx)
	if err != nil {
		return "", err
	}
	committed = true
	rec := &store.Snapshot{ID: id, Tenant: sb.Tenant, Type: snapshotSuspend, SandboxID: sb.ID, ParentID: sb.SnapshotID, Image: sb.Image,
		Spec: sb.Spec, SizeBytes: size, Checksum: sum, PausedMS: paused.Milliseconds(), CreatedAt: m.now().UTC()}
	if err := m.recordSnapshot(ctx, rec); err != nil {
		return "", err
	}
	return id, nil
}

// dropSnapshot deletes a snapshot's record and files, logging failures.
func (m *Manager) dropSnapshot(ctx context.Context, id string) {
	if err := m.store.DeleteSnapshot(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		m.log.Warn("delete snapshot", "snapshot", id, "err", err)
	}
	if err := m.snaps.Delete(id); err != nil {
		m.log.Warn("delete snapshot files", "snapshot", id, "err", err)
	}
}

// setState records a state change (through the state machine) with an
// optional extra mutation.
func (m *Manager) setState(ctx context.Context, id string, to api.SandboxState, reason string, fn func(*store.Sandbox)) (*store.Sandbox, error) {
	return m.store.Update(ctx, id, func(s *store.Sandbox) error {
		if err := checkTransition(s.ID, s.State, to); err != nil {
			return err
		}
		if m.elsewhere(s) { // another node adopted it meanwhile
			return errElsewhere(s)
		}
		s.State, s.StateReason = to, reason
		if fn != nil {
			fn(s)
		}
		return nil
	})
}

// Resume brings a suspended sandbox back under the same id and name, with
// its files, kernels and processes. A failure at any step, a panic or a
// delete's cancellation included, frees whatever was restored and leaves
// the sandbox suspended with its image intact.
func (m *Manager) Resume(ctx context.Context, ref string) (_ *api.Sandbox, err error) {
	sb, err := m.store.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := m.lockOp(ctx, sb.ID, "resume", lockOpts{})
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
	if sb.State != api.StateSuspended {
		return nil, errdefs.FailedPrecondition("sandbox %s is %s; only a suspended sandbox can be resumed", sb.ID, sb.State)
	}
	if m.elsewhere(sb) {
		return nil, errElsewhere(sb)
	}
	h, problem := m.criuHost()
	if h == nil {
		return nil, errdefs.Unavailable("resume needs memory snapshots, unavailable on this host: %s", problem)
	}
	// A delete may cancel ctx at any step: then it is the reason (opErr).
	snap, err := m.store.GetSnapshot(ctx, sb.SuspendImage)
	if err != nil {
		return nil, opErr(ctx, fmt.Errorf("suspend image of %s: %w", sb.ID, err))
	}
	if err := m.snaps.VerifyContext(ctx, snap.ID, snap.Checksum); err != nil {
		return nil, opErr(ctx, err)
	}
	img, err := m.images.Get(ctx, sb.Image)
	if err != nil {
		return nil, opErr(ctx, fmt.Errorf("resume %s: the image it was made from: %w", sb.ID, err))
	}
	releaseQuota, err := m.admitQuota(ctx, sb.Tenant, sb.ID, sb.Spec)
	if err != nil {
		return nil, opErr(ctx, fmt.Errorf("%w; the sandbox stays suspended", err))
	}
	defer releaseQuota()
	started, err := m.beginStart()
	if err != nil {
		return nil, fmt.Errorf("%w; the sandbox stays suspended", err)
	}
	defer started()
	release, err := m.admitResume(ctx, sb.ID, sb.Spec)
	if err != nil {
		return nil, opErr(ctx, err)
	}
	defer release()
	if _, err := m.setState(ctx, sb.ID, api.StateResuming, "", nil); err != nil {
		return nil, opErr(ctx, err)
	}
	var info *runtime.Info
	done, failure := false, "interrupted by an internal error"
	defer func() {
		if done {
			return
		}
		bg := context.WithoutCancel(ctx)
		m.untrack(sb.ID)
		if info == nil {
			info = &runtime.Info{} // whatever a failed restore left, by id
		}
		if err := m.rt.Destroy(bg, sb.ID, info); err != nil {
			m.log.Error("free a failed resume", "sandbox", sb.ID, "err", err)
		}
		m.setState(bg, sb.ID, api.StateSuspended, "resume failed: "+failure, nil)
	}()
	fail := func(err error) (*api.Sandbox, error) {
		err = opErr(ctx, err)
		failure = err.Error()
		return nil, fmt.Errorf("resume %s: %w", sb.ID, err)
	}
	if err := hookPoint(ctx, "resume:recorded", sb.ID, sb.Name); err != nil {
		return fail(err)
	}
	start := time.Now()
	hostname := sb.Name
	if hostname == "" {
		hostname = sb.ID
	}
	criuDir := filepath.Join(m.snaps.Path(snap.ID), criuDirName)
	info, err = m.restoreMemory(ctx, h, runtime.Spec{
		ID: sb.ID, Hostname: hostname, Image: img,
		Limits:        m.limits(sb.Spec),
		DiskMB:        sb.Spec.DiskMB,
		AllowInternet: sb.Spec.AllowInternetAccess,
		Egress:        egress(sb.Spec),
		FromFS:        m.snapshotFS(snap.ID),
		UIDBase:       sb.Spec.UIDBase,
		FromFSBase:    sb.Spec.UIDBase,
	}, criuDir)
	if err != nil {
		return fail(err)
	}
	if err := hookPoint(ctx, "resume:restored", sb.ID, sb.Name); err != nil {
		return fail(err)
	}
	now := m.now().UTC()
	sb.LastActiveAt = now
	m.track(sb, info).setBase(baseIn(snap.ID, criuDir))
	// Not into sb: setState returns nil on failure, and the cleanup above
	// and fail still need sb (a runtime exit report can mark the sandbox
	// error while it restores, and then it cannot become running).
	resumed, err := m.setState(ctx, sb.ID, api.StateRunning, "", func(s *store.Sandbox) {
		s.Runtime = runtime.MarshalInfo(info)
		s.LastActiveAt = now
	})
	if err != nil {
		return fail(err)
	}
	sb, done = resumed, true
	m.log.Info("sandbox resumed", "sandbox", sb.ID, "ms", time.Since(start).Milliseconds())
	return m.view(sb), nil
}

func (m *Manager) latestSuspendImage(ctx context.Context, id string) string {
	list, err := m.store.ListSnapshots(ctx, id)
	if err != nil {
		return ""
	}
	for _, sn := range list { // newest first
		if sn.Type == snapshotSuspend && m.snaps.Verify(sn.ID, sn.Checksum) == nil {
			return sn.ID
		}
	}
	return ""
}

// dropStraySuspendImages deletes a sandbox's suspend images except keep.
func (m *Manager) dropStraySuspendImages(ctx context.Context, id, keep string) {
	list, _ := m.store.ListSnapshots(ctx, id)
	for _, sn := range list {
		if sn.Type == snapshotSuspend && sn.ID != keep {
			m.dropSnapshot(ctx, sn.ID)
		}
	}
}

// resumeFor makes a suspended sandbox available to a call that needs it
// running, unless the sandbox opted out of auto-resume.
func (m *Manager) resumeFor(ctx context.Context, sb *store.Sandbox) error {
	if sb.Spec.NoAutoResume {
		return errdefs.FailedPrecondition("sandbox %s is suspended and was created with auto_resume: false; resume it first", sb.ID)
	}
	_, err := m.Resume(ctx, sb.ID)
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		return nil // resumed meanwhile by another call
	}
	return err
}
