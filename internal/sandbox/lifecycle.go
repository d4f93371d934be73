package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
)

// reapInterval is how often idle timeouts and lifetimes are checked.
const reapInterval = 500 * time.Millisecond

// Start reconciles the store with the host after a (re)start and returns
// without waiting for any sandbox: every live sandbox the store names for
// this node is marked settling and settled in the background (settle.go),
// where it ends up adopted (its processes and agent still answer) or in
// its documented state after a crash, with leftovers freed. Calls about a
// sandbox still settling answer 503 with Retry-After; Settled says when all
// are done. Snapshot files that no record owns are removed before Start
// returns.
func (m *Manager) Start(ctx context.Context) error {
	sbs, err := m.store.List(ctx, store.ListFilter{Node: m.node})
	if err != nil {
		return err
	}
	var todo []*store.Sandbox
	m.mu.Lock()
	for _, sb := range sbs {
		if m.elsewhere(sb) || sb.State == api.StateTerminated {
			continue
		}
		m.settling[sb.ID] = true
		todo = append(todo, sb)
	}
	m.mu.Unlock()
	// The directories there are now: those of sandboxes made from now on
	// (builds' included, which have no row) are never swept.
	dirs, err := m.rt.SandboxDirs()
	if err != nil {
		return err
	}
	// Before anything can commit a new snapshot: files without a record
	// are what a crash left.
	if err := m.reconcileSnapshots(ctx); err != nil {
		return fmt.Errorf("reconcile snapshots: %w", err)
	}
	if err := m.loadPools(ctx); err != nil {
		return fmt.Errorf("load pools: %w", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		<-m.stop
		cancel()
	}()
	go m.background(ctx, todo, dirs)
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

// reapLoop runs the idle reaper until Close.
func (m *Manager) reapLoop() {
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
				// A delete that won the race (it cancels the suspend, or
				// ended the sandbox before the suspend began) is the
				// client's choice, not a failure.
				deleted := errors.Is(err, errDeletedDuring) || (errors.Is(err, errdefs.ErrFailedPrecondition) && !m.current(l))
				failed := err != nil && !errors.Is(err, errdefs.ErrBusy) && !deleted
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
				switch {
				case failed:
					m.log.Error("suspend idle sandbox", "sandbox", l.id, "retry_in", backoff, "err", err)
				case deleted:
					m.log.Info("idle suspend gave way to a delete", "sandbox", l.id, "err", err)
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
