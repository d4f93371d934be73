package sandbox

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
)

// Settling: what a restarted daemon does with the sandboxes the previous
// one left, without ever keeping its API down.
//
// Start lists the node's live rows and marks each as settling, then
// returns: the daemon listens at once. In the background, every settling
// sandbox is settled under its lifecycle lock, a few at a time: CRIU
// workers the dead daemon left (a dump cut short) are waited for, and
// killed if they outlive leftoverCRIUWait; a frozen cgroup (a suspend,
// checkpoint or fork cut short had paused it) is thawed; the init is
// adopted and its agent must answer within agentWait; then the row gets
// its documented state (docs/ARCHITECTURE.md, "A crash at any point").
// Meanwhile every call about a settling sandbox answers 503 unavailable
// with Retry-After (calls about other sandboxes, creates and lists are
// served). A fork cut short is undone on the way: its snapshot deleted
// before the rows are settled, its branches ended as they are. Once all
// are settled the leftovers of ended sandboxes are swept, pools adopt
// their ready sandboxes and refill, and the idle reaper starts.

const (
	// DefaultAgentWait bounds how long a restarted daemon waits for an
	// adopted sandbox's agent to answer; one that does not is an error
	// (its processes are freed).
	DefaultAgentWait = 15 * time.Second
	// leftoverCRIUWait bounds the wait for CRIU workers of the dead daemon
	// (a dump runs to its end or fails once its caller is gone; seconds).
	leftoverCRIUWait = 30 * time.Second
	// settleParallel is how many sandboxes are settled at once.
	settleParallel = 4
	// settleRetryAfter is the Retry-After of calls about a sandbox being
	// settled.
	settleRetryAfter = time.Second
	// forkIntent marks a fork's snapshot until the fork answered
	// (snapshot.Store.MarkIntent).
	forkIntent = "fork"
)

// Settled is closed once every sandbox a restart found is settled and
// background work (pools, the idle reaper) has started.
func (m *Manager) Settled() <-chan struct{} { return m.settled }

// Recovering is how many sandboxes a restart found are still settling.
func (m *Manager) Recovering() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.settling)
}

// settlingErr is the error of a call about sandbox id while it is being
// settled (nil when it is not).
func (m *Manager) settlingErr(id string) error {
	m.mu.Lock()
	s := m.settling[id]
	m.mu.Unlock()
	if !s {
		return nil
	}
	return errdefs.RetryAfter(errdefs.Unavailable(
		"sandbox %s is being recovered after a daemon restart; try again in a moment", id), settleRetryAfter)
}

// lookup finds the sandbox a call names (id or name), refusing one that is
// still being settled.
func (m *Manager) lookup(ctx context.Context, ref string) (*store.Sandbox, error) {
	sb, err := m.store.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := m.settlingErr(sb.ID); err != nil {
		return nil, err
	}
	return sb, nil
}

// background settles what Start found, then runs the Manager's background
// work until Close.
func (m *Manager) background(ctx context.Context, todo []*store.Sandbox, dirs []string) {
	defer close(m.done)
	start := time.Now()
	if found, killed := m.rt.LeftoverCRIU(ctx, leftoverCRIUWait); len(found) > 0 {
		m.log.Warn("waited for CRIU workers left by the previous daemon", "found", len(found), "killed", len(killed),
			"ms", time.Since(start).Milliseconds())
	}
	if m.snaps != nil {
		if err := m.snaps.RemoveLeftovers(); err != nil {
			m.log.Error("remove unfinished snapshots", "err", err)
		}
	}
	forks := m.cutForks(ctx)
	sem := make(chan struct{}, settleParallel)
	var wg sync.WaitGroup
	for _, sb := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.settleOne(ctx, sb, forks)
		}()
	}
	wg.Wait()
	if ctx.Err() == nil {
		// Every branch of those forks is ended now.
		for id := range forks {
			if err := m.snaps.ClearIntent(forkIntent, id); err != nil {
				m.log.Warn("clear a fork's mark", "snapshot", id, "err", err)
			}
		}
	}
	if len(todo) > 0 {
		m.log.Info("sandboxes settled after the restart", "count", len(todo), "ms", time.Since(start).Milliseconds())
	}
	if ctx.Err() != nil {
		close(m.settled)
		return
	}
	m.sweepSandboxDirs(ctx, dirs)
	if err := m.adoptPoolMembers(ctx); err != nil {
		m.log.Error("adopt pool members", "err", err)
	}
	if err := m.startDefaultPool(ctx); err != nil {
		m.log.Error("default pool", "err", err)
	}
	close(m.settled)
	m.reapLoop()
}

// settleOne gives one sandbox the previous daemon left its documented
// state; whatever happens, it is no longer settling afterwards. A branch of
// a fork cut short (forks) is ended.
func (m *Manager) settleOne(ctx context.Context, sb *store.Sandbox, forks map[string]bool) {
	defer func() {
		m.mu.Lock()
		delete(m.settling, sb.ID)
		m.mu.Unlock()
	}()
	var err error
	defer recoverTo(m.log, &err, "settling sandbox "+sb.ID)
	// Nothing else takes it meanwhile (lockOp refuses settling ids), so
	// this does not wait. The work goes on under ctx, which the daemon's
	// stop cancels (the lock's own context is one that only a delete
	// would).
	_, unlock, err := m.locks.Lock(ctx, sb.ID, "recovery", lockOpts{})
	if err != nil {
		m.log.Error("settle sandbox", "sandbox", sb.ID, "err", err)
		return
	}
	defer unlock()
	if forks[sb.SnapshotID] {
		if _, err := m.end(ctx, sb.ID, "the fork that made it was cut short by a daemon stop"); err != nil {
			m.log.Error("end a branch of a fork cut short", "sandbox", sb.ID, "err", err)
		}
		return
	}
	info, err := runtime.UnmarshalInfo(sb.Runtime)
	if err != nil {
		info = &runtime.Info{}
	}
	switch sb.State {
	case api.StateRunning, api.StateSuspending, api.StateLost:
		m.settleLive(ctx, sb, info)
	case api.StateResuming:
		// The restored processes (if any) were never recorded: free them;
		// the image is intact, so the sandbox is suspended again.
		m.destroy(ctx, sb.ID, &runtime.Info{})
		m.setState(ctx, sb.ID, api.StateSuspended, "daemon restarted during a resume", nil)
	case api.StateSuspended, api.StateError:
		// Nothing runs; make sure nothing is left behind.
		m.destroy(ctx, sb.ID, &runtime.Info{})
	default:
		m.setError(ctx, sb.ID, "daemon stopped while the sandbox was "+string(sb.State))
	}
}

// destroy frees what sandbox id held, logging a failure (a later start
// tries again).
func (m *Manager) destroy(ctx context.Context, id string, info *runtime.Info) {
	if err := m.rt.Destroy(ctx, id, info); err != nil {
		m.log.Error("clean up sandbox", "sandbox", id, "err", err)
	}
}

// settleLive settles a sandbox whose processes may still run: one found
// running, in the middle of a suspend, or lost (another node gave up on
// this one while it was unreachable).
func (m *Manager) settleLive(ctx context.Context, sb *store.Sandbox, info *runtime.Info) {
	var thawed string
	if info.PID > 0 {
		rctx, cancel := context.WithTimeout(ctx, leftoverCRIUWait)
		rec, err := m.rt.Recover(rctx, sb.ID)
		cancel()
		if err != nil {
			m.log.Error("recover sandbox", "sandbox", sb.ID, "err", err)
		}
		if rec.Frozen {
			// Only this daemon freezes sandboxes, and only for these.
			what := "a checkpoint or fork"
			if sb.State == api.StateSuspending {
				what = "a suspend"
			}
			thawed = "thawed: it was paused for " + what + " the stopped daemon did not finish"
			m.log.Warn("sandbox was left frozen by the stopped daemon; thawed", "sandbox", sb.ID, "state", sb.State,
				"paused_for", what, "tracers", rec.Tracers)
		}
	}
	why := "sandbox processes were lost while the daemon was down"
	if info.PID > 0 {
		if err := m.rt.Adopt(ctx, sb.ID, info); err != nil {
			why += ": " + err.Error()
		} else {
			l := m.track(sb, info)
			if sb.State == api.StateRunning {
				l.setBase(m.adoptedBase(ctx, sb))
			}
			err := m.agentAnswers(ctx, l)
			if err == nil {
				m.adopted(ctx, sb, thawed)
				return
			}
			m.untrack(sb.ID)
			if ctx.Err() != nil {
				return // the daemon is stopping: the next start settles it
			}
			why = "sandbox agent stopped answering while the daemon was down: " + err.Error()
		}
	}
	if thawed != "" {
		why += " (" + thawed + ")"
	}
	switch sb.State {
	case api.StateRunning:
		m.setError(ctx, sb.ID, why)
	case api.StateSuspending:
		m.destroy(ctx, sb.ID, info)
		// Freed: suspended if its new image was committed, else its last one.
		if img := m.latestSuspendImage(ctx, sb.ID); img != "" {
			m.setState(ctx, sb.ID, api.StateSuspended, "daemon restarted during a suspend", func(s *store.Sandbox) { s.SuspendImage = img; s.Runtime = nil })
			m.dropStraySuspendImages(ctx, sb.ID, img)
			return
		}
		m.setError(ctx, sb.ID, "daemon stopped during a suspend, before its image was saved")
	case api.StateLost:
		// It stays lost (only a delete ends it); nothing of it stays here.
		m.destroy(ctx, sb.ID, info)
	}
}

// adopted records a sandbox whose processes and agent survived the
// restart as running.
func (m *Manager) adopted(ctx context.Context, sb *store.Sandbox, thawed string) {
	reason := ""
	switch sb.State {
	case api.StateRunning:
		m.log.Info("adopted running sandbox", "sandbox", sb.ID)
		if thawed != "" {
			// No transition: the reason says what happened to it.
			if _, err := m.store.Update(ctx, sb.ID, func(s *store.Sandbox) error {
				if s.State != api.StateRunning {
					return errAlready
				}
				s.StateReason = "daemon restarted; " + thawed
				return nil
			}); err != nil && !errors.Is(err, errAlready) {
				m.log.Error("record the thaw of an adopted sandbox", "sandbox", sb.ID, "err", err)
			}
		}
		return
	case api.StateSuspending:
		reason = "daemon restarted during a suspend; still running"
	case api.StateLost:
		reason = "its node answers again and its processes survived"
	}
	if thawed != "" {
		reason += "; " + thawed
	}
	if _, err := m.setState(ctx, sb.ID, api.StateRunning, reason, nil); err != nil {
		m.log.Error("record an adopted sandbox running", "sandbox", sb.ID, "err", err)
		m.setError(ctx, sb.ID, "daemon restarted; could not record it running: "+err.Error())
		return
	}
	if sb.State == api.StateSuspending {
		m.dropStraySuspendImages(ctx, sb.ID, sb.SuspendImage)
	}
	m.log.Info("adopted sandbox", "sandbox", sb.ID, "was", sb.State, "reason", reason)
}

// agentAnswers asks an adopted sandbox's agent for its health until it
// answers or agentWait passes (an agent starved of CPU can take a moment).
// An agent that is gone (its socket refuses or is missing) fails at once.
func (m *Manager) agentAnswers(ctx context.Context, l *live) error {
	ctx, cancel := context.WithTimeout(ctx, m.agentWait)
	defer cancel()
	for {
		hctx, hcancel := context.WithTimeout(ctx, 3*time.Second)
		err := l.agent.Health(hctx)
		slow := hctx.Err() != nil || errors.Is(err, syscall.EAGAIN)
		hcancel()
		if err == nil {
			return nil
		}
		if !slow {
			return err
		}
		select {
		case <-ctx.Done():
			return errdefs.Timeout("no answer within %s: %v", m.agentWait, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cutForks undoes the forks a crash cut short, but for their branches: a
// fork is all or nothing, and its caller never learnt its snapshot's id, so
// the snapshot is deleted. It returns the marked snapshots; their branches
// are ended as they are settled, and the marks cleared after that (a crash
// before then finds them again).
func (m *Manager) cutForks(ctx context.Context) map[string]bool {
	forks := map[string]bool{}
	if m.snaps == nil {
		return forks
	}
	ids, err := m.snaps.Intents(forkIntent)
	if err != nil {
		m.log.Error("list forks cut short", "err", err)
		return forks
	}
	ctx = context.WithoutCancel(ctx)
	for _, id := range ids {
		forks[id] = true
		if err := m.store.DeleteSnapshot(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			m.log.Error("delete the snapshot of a fork cut short", "snapshot", id, "err", err)
			continue
		}
		if err := m.snaps.Delete(id); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.log.Warn("remove the files of a fork cut short", "snapshot", id, "err", err)
		}
		m.log.Info("undid a fork cut short by the daemon's stop", "snapshot", id)
	}
	return forks
}

// sweepSandboxDirs destroys the sandbox directories found at start (dirs)
// that no live row of this node owns: a terminated sandbox's leftovers, one
// that moved to another node, or one the store never recorded (the daemon died between making its directory and its
// record).
func (m *Manager) sweepSandboxDirs(ctx context.Context, dirs []string) {
	for _, id := range dirs {
		sb, err := m.store.Get(ctx, id)
		switch {
		case err == nil && sb.ID == id && sb.State != api.StateTerminated && !m.elsewhere(sb):
			continue
		case err != nil && !errors.Is(err, errdefs.ErrNotFound):
			m.log.Error("look up the row of a sandbox dir", "sandbox", id, "err", err)
			continue
		}
		m.destroy(ctx, id, &runtime.Info{})
	}
}
