package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
)

// reapInterval is how often idle timeouts and lifetimes are checked.
const reapInterval = 500 * time.Millisecond

// Start reconciles the store with the host after a (re)start, then starts the
// idle reaper. Every sandbox the store says is live ends up either adopted
// (its init and agent still answer) or marked error and cleaned up; sandbox
// directories that no record owns are removed.
func (m *Manager) Start(ctx context.Context) error {
	sbs, err := m.store.List(ctx, store.ListFilter{Node: m.node})
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, sb := range sbs {
		if m.elsewhere(sb) {
			continue
		}
		known[sb.ID] = true
		if sb.State == api.StateTerminated {
			continue
		}
		info, err := runtime.UnmarshalInfo(sb.Runtime)
		if err != nil {
			info = &runtime.Info{}
		}
		if m.reconcileSuspend(ctx, sb, info) {
			continue
		}
		switch sb.State {
		case api.StateLost:
			// Another node gave up on this one while it was unreachable (a
			// restart slower than the node timeout, a partition). If its
			// processes are still here, the sandbox is running again.
			if info.PID > 0 && m.rt.Adopt(ctx, sb.ID, info) == nil {
				l := m.track(sb, info)
				if l.agent.Health(ctx) == nil {
					if _, err := m.setState(ctx, sb.ID, api.StateRunning, "its node answers again and its processes survived", nil); err == nil {
						m.log.Info("sandbox marked lost is running again", "sandbox", sb.ID)
						continue
					}
				}
				m.untrack(sb.ID)
			}
			if err := m.rt.Destroy(ctx, sb.ID, info); err != nil {
				m.log.Error("clean up lost sandbox", "sandbox", sb.ID, "err", err)
			}
		case api.StateRunning:
			if err := m.rt.Adopt(ctx, sb.ID, info); err == nil {
				l := m.track(sb, info)
				l.setBase(m.adoptedBase(ctx, sb))
				if herr := l.agent.Health(ctx); herr == nil {
					m.log.Info("adopted running sandbox", "sandbox", sb.ID)
					continue
				} else {
					m.untrack(sb.ID)
					err = herr
				}
				m.setError(ctx, sb.ID, "sandbox agent stopped answering while the daemon was down: "+err.Error())
			} else {
				m.setError(ctx, sb.ID, "sandbox processes were lost while the daemon was down: "+err.Error())
			}
		case api.StateError:
			// Already marked; make sure nothing is left behind.
			if err := m.rt.Destroy(ctx, sb.ID, info); err != nil {
				m.log.Error("clean up errored sandbox", "sandbox", sb.ID, "err", err)
			}
		default:
			m.setError(ctx, sb.ID, "daemon stopped while the sandbox was "+string(sb.State))
		}
	}
	dirs, err := m.rt.SandboxDirs()
	if err != nil {
		return err
	}
	for _, id := range dirs {
		if known[id] {
			sb, err := m.store.Get(ctx, id)
			if err != nil || sb.State != api.StateTerminated {
				continue
			}
		}
		// A terminated sandbox with leftovers, or one the store never recorded
		// (the daemon died between making its directory and its record).
		if err := m.rt.Destroy(ctx, id, &runtime.Info{}); err != nil {
			m.log.Error("remove leftover sandbox dir", "sandbox", id, "err", err)
		}
	}
	if err := m.reconcileSnapshots(ctx); err != nil {
		return fmt.Errorf("reconcile snapshots: %w", err)
	}
	if err := m.loadPools(ctx); err != nil {
		return fmt.Errorf("load pools: %w", err)
	}
	if err := m.startDefaultPool(ctx); err != nil {
		return fmt.Errorf("default pool: %w", err)
	}
	go m.reapLoop()
	return nil
}

// Close stops background work. Running sandboxes keep running.
func (m *Manager) Close() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
		<-m.done
	}
	m.flushActivity(context.Background())
	if m.cells != nil {
		m.cells.Close()
	}
}

func (m *Manager) reapLoop() {
	defer close(m.done)
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.reapOnce(context.Background())
		}
	}
}

// reapOnce terminates sandboxes past their idle timeout or lifetime and
// persists recent activity. A sandbox with a call in flight is not idle.
func (m *Manager) reapOnce(ctx context.Context) {
	now := m.now()
	canSuspend := m.criuAvailable()
	type victim struct{ id, reason string }
	var victims []victim
	m.mu.Lock()
	for _, l := range m.live {
		l.mu.Lock()
		idle := l.inflight == 0 && now.Sub(l.lastActive) >= l.timeout
		expired := !l.deadline.IsZero() && now.After(l.deadline)
		named := l.name != "" || l.keepOnIdle
		if l.pooled {
			idle = false
		}
		startSuspend := idle && named && canSuspend && !l.suspending && !expired && !now.Before(l.nextSuspend)
		if startSuspend {
			l.suspending = true
		}
		l.mu.Unlock()
		switch {
		case expired:
			victims = append(victims, victim{l.id, "max lifetime reached"})
		case idle && !named:
			victims = append(victims, victim{l.id, "idle timeout"})
		case startSuspend:
			// Named sandboxes keep their state: suspended, not terminated.
			go func(l *live) {
				var err error
				defer recoverTo(m.log, &err, "idle suspend")
				_, err = m.Suspend(context.Background(), l.id, reasonIdle)
				l.mu.Lock()
				l.suspending = false
				failed := err != nil && !errors.Is(err, errdefs.ErrBusy)
				if failed {
					// A sandbox that cannot be dumped (CRIU refuses some
					// states) would otherwise be frozen and dumped again
					// twice a second: wait, longer each time.
					l.suspendBackoff = min(max(2*l.suspendBackoff, time.Minute), time.Hour)
					l.nextSuspend = m.now().Add(l.suspendBackoff)
				} else if err == nil {
					l.suspendBackoff, l.nextSuspend = 0, time.Time{}
				}
				backoff := l.suspendBackoff
				l.mu.Unlock()
				if failed {
					m.log.Error("suspend idle sandbox", "sandbox", l.id, "retry_in", backoff, "err", err)
				}
			}(l)
		}
	}
	m.mu.Unlock()
	// Suspended sandboxes cost only disk, but their lifetime still ends.
	m.reapTick++
	if m.reapTick%20 == 0 {
		m.sweepIDRanges(ctx)
	}
	if m.reapTick%10 == 0 {
		if list, err := m.store.List(ctx, store.ListFilter{State: api.StateSuspended, Node: m.node}); err == nil {
			for _, sb := range list {
				if sb.Spec.MaxLifetimeSecs > 0 && now.After(sb.CreatedAt.Add(time.Duration(sb.Spec.MaxLifetimeSecs)*time.Second)) {
					victims = append(victims, victim{sb.ID, "max lifetime reached"})
				}
			}
		}
	}
	for _, v := range victims {
		// The reaper does not wait for a busy sandbox: it tries again at
		// its next tick.
		if _, err := m.terminate(ctx, v.id, v.reason, lockOpts{Wait: -1}); err != nil && !errors.Is(err, errdefs.ErrBusy) {
			m.log.Error("reap sandbox", "sandbox", v.id, "err", err)
		}
	}
	m.flushActivity(ctx)
}

// flushActivity writes last-activity times to the store. They are kept in
// memory on the hot path (no disk write per exec) and flushed here.
func (m *Manager) flushActivity(ctx context.Context) {
	m.mu.Lock()
	ls := make([]*live, 0, len(m.live))
	for _, l := range m.live {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	for _, l := range ls {
		l.mu.Lock()
		at, dirty := l.lastActive, l.lastActive.After(l.persistedAt)
		l.mu.Unlock()
		if !dirty {
			continue
		}
		if err := m.store.Touch(ctx, l.id, at); err != nil {
			m.log.Warn("persist activity", "sandbox", l.id, "err", err)
			continue
		}
		l.mu.Lock()
		l.persistedAt = at
		l.mu.Unlock()
	}
}

// LiveCount is the number of sandboxes this Manager runs.
func (m *Manager) LiveCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live)
}
