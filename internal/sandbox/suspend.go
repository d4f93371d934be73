package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
)

// Suspend and resume (SPEC §1): a suspend is a memory snapshot of the
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

// snapshotSuspend marks a suspend image among the snapshots.
const snapshotSuspend = "suspend"

// lifecycleLock serializes suspend, resume and delete of one sandbox.
func (m *Manager) lifecycleLock(id string) func() {
	m.mu.Lock()
	if m.locks == nil {
		m.locks = map[string]*sync.Mutex{}
	}
	mu := m.locks[id]
	if mu == nil {
		mu = &sync.Mutex{}
		m.locks[id] = mu
	}
	m.mu.Unlock()
	mu.Lock()
	return mu.Unlock
}

// Suspend saves a running sandbox to disk and frees its CPU and memory.
func (m *Manager) Suspend(ctx context.Context, ref, reason string) (*api.Sandbox, error) {
	if m.criu == nil {
		return nil, errdefs.Unavailable("suspend needs memory snapshots, unavailable on this host: %s", m.criuProblem)
	}
	sb, err := m.store.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	unlock := m.lifecycleLock(sb.ID)
	defer unlock()
	ctx = context.WithoutCancel(ctx)
	if sb, err = m.store.Get(ctx, sb.ID); err != nil {
		return nil, err
	}
	if sb.State != api.StateRunning {
		return nil, errdefs.FailedPrecondition("sandbox %s is %s; only a running sandbox can be suspended", sb.ID, sb.State)
	}
	l, release, err := m.acquireExclusive(ctx, sb.ID)
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
	faultPoint("suspend:recorded")
	start := time.Now()
	img, err := m.takeSuspendImage(ctx, l, sb)
	faultPoint("suspend:imaged")
	if err != nil {
		// Nothing was freed: the sandbox goes on running.
		m.setState(ctx, sb.ID, api.StateRunning, "", nil)
		return nil, fmt.Errorf("suspend: %w", err)
	}
	m.untrack(sb.ID)
	if err := m.rt.Destroy(ctx, sb.ID, l.info); err != nil {
		m.log.Error("free suspended sandbox", "sandbox", sb.ID, "err", err)
	}
	faultPoint("suspend:freed")
	old := sb.SuspendImage
	sb, err = m.setState(ctx, sb.ID, api.StateSuspended, reason, func(s *store.Sandbox) {
		s.SuspendImage = img
		s.Runtime = nil
	})
	if err != nil {
		return nil, err
	}
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
	paused, err := m.captureMemory(ctx, l, sb, p.Dir())
	if err != nil {
		p.Abort()
		return "", err
	}
	size, sum, err := p.Commit()
	if err != nil {
		p.Abort()
		return "", err
	}
	rec := &store.Snapshot{ID: id, Type: snapshotSuspend, SandboxID: sb.ID, ParentID: sb.SnapshotID, Image: sb.Image,
		Spec: sb.Spec, SizeBytes: size, Checksum: sum, PausedMS: paused.Milliseconds(), CreatedAt: m.now().UTC()}
	if err := m.store.CreateSnapshot(ctx, rec); err != nil {
		m.snaps.Delete(id)
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
func (m *Manager) setState(ctx context.Context, id, to, reason string, fn func(*store.Sandbox)) (*store.Sandbox, error) {
	return m.store.Update(ctx, id, func(s *store.Sandbox) error {
		if err := checkTransition(s.ID, s.State, to); err != nil {
			return err
		}
		s.State, s.StateReason = to, reason
		if fn != nil {
			fn(s)
		}
		return nil
	})
}

// Resume brings a suspended sandbox back under the same id and name, with
// its files, kernels and processes.
func (m *Manager) Resume(ctx context.Context, ref string) (*api.Sandbox, error) {
	sb, err := m.store.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	unlock := m.lifecycleLock(sb.ID)
	defer unlock()
	ctx = context.WithoutCancel(ctx)
	if sb, err = m.store.Get(ctx, sb.ID); err != nil {
		return nil, err
	}
	if sb.State != api.StateSuspended {
		return nil, errdefs.FailedPrecondition("sandbox %s is %s; only a suspended sandbox can be resumed", sb.ID, sb.State)
	}
	if m.criu == nil {
		return nil, errdefs.Unavailable("resume needs memory snapshots, unavailable on this host: %s", m.criuProblem)
	}
	snap, err := m.store.GetSnapshot(ctx, sb.SuspendImage)
	if err != nil {
		return nil, fmt.Errorf("suspend image of %s: %w", sb.ID, err)
	}
	if err := m.snaps.Verify(snap.ID, snap.Checksum); err != nil {
		return nil, err
	}
	img, err := m.images.Get(ctx, sb.Image)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if _, err := m.setState(ctx, sb.ID, api.StateResuming, "", nil); err != nil {
		return nil, err
	}
	faultPoint("resume:recorded")
	start := time.Now()
	hostname := sb.Name
	if hostname == "" {
		hostname = sb.ID
	}
	info, err := m.snapper.RestoreMemory(ctx, m.criu, runtime.Spec{
		ID: sb.ID, Hostname: hostname, Image: img,
		Limits:        runtime.Limits{CPUs: sb.Spec.CPUs, MemoryMB: sb.Spec.MemoryMB, PIDs: sb.Spec.PIDsLimit},
		DiskMB:        sb.Spec.DiskMB,
		AllowInternet: sb.Spec.AllowInternetAccess,
		FromFS:        m.snapshotFS(snap.ID),
	}, filepath.Join(m.snaps.Path(snap.ID), criuDirName))
	if err != nil {
		m.setState(ctx, sb.ID, api.StateSuspended, "resume failed: "+err.Error(), nil)
		return nil, fmt.Errorf("resume %s: %w", sb.ID, err)
	}
	faultPoint("resume:restored")
	now := m.now().UTC()
	sb.LastActiveAt = now
	l := m.track(sb, info)
	sb, err = m.setState(ctx, sb.ID, api.StateRunning, "", func(s *store.Sandbox) {
		s.Runtime = runtime.MarshalInfo(info)
		s.LastActiveAt = now
	})
	if err != nil {
		m.untrack(l.id)
		m.rt.Destroy(ctx, l.id, info)
		return nil, err
	}
	m.log.Info("sandbox resumed", "sandbox", sb.ID, "ms", time.Since(start).Milliseconds())
	return m.view(sb), nil
}

// reconcileSuspend settles a sandbox the daemon left mid-suspend or
// mid-resume. It reports whether it handled the sandbox.
func (m *Manager) reconcileSuspend(ctx context.Context, sb *store.Sandbox, info *runtime.Info) bool {
	switch sb.State {
	case api.StateSuspending:
		// Still running (the suspend had not freed it): it stays running.
		if info.PID > 0 && m.rt.Adopt(ctx, sb.ID, info) == nil {
			l := m.track(sb, info)
			if l.agent.Health(ctx) == nil {
				m.setState(ctx, sb.ID, api.StateRunning, "daemon restarted during a suspend; still running", nil)
				m.dropStraySuspendImages(ctx, sb.ID, sb.SuspendImage)
				return true
			}
			m.untrack(sb.ID)
		}
		m.rt.Destroy(ctx, sb.ID, info)
		// Freed: suspended if its new image was committed, else its last one.
		if img := m.latestSuspendImage(ctx, sb.ID); img != "" {
			m.setState(ctx, sb.ID, api.StateSuspended, "daemon restarted during a suspend", func(s *store.Sandbox) { s.SuspendImage = img; s.Runtime = nil })
			m.dropStraySuspendImages(ctx, sb.ID, img)
			return true
		}
		m.setError(ctx, sb.ID, "daemon stopped during a suspend, before its image was saved")
		return true
	case api.StateResuming:
		// The restored processes (if any) were never recorded: free them;
		// the image is intact, so the sandbox is suspended again.
		m.rt.Destroy(ctx, sb.ID, &runtime.Info{})
		m.setState(ctx, sb.ID, api.StateSuspended, "daemon restarted during a resume", nil)
		return true
	case api.StateSuspended:
		m.rt.Destroy(ctx, sb.ID, &runtime.Info{})
		return true
	}
	return false
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
