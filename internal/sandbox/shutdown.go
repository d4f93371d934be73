package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/tenant"
)

// What a stopping daemon does with the sandboxes that run: with nobody to
// idle them out or enforce their lifetimes until the next start adopts them,
// leaving them running is right only for a restart under a service manager.
const (
	// OnExitSuspend suspends named sessions (those that would suspend when
	// idle) to disk and terminates the rest: nothing is lost, nothing runs.
	OnExitSuspend = "suspend"
	// OnExitKeep leaves every sandbox running; the next start adopts them.
	OnExitKeep = "keep"
	// OnExitTerminate terminates every sandbox.
	OnExitTerminate = "terminate"
)

// reasonShutdown suspends and terminates at the daemon's exit.
const reasonShutdown = "daemon stopping"

// shutdownParallel bounds the suspends and terminations run at once.
const shutdownParallel = 4

// ShutdownReport says what Shutdown did.
type ShutdownReport struct {
	Suspended, Terminated, Kept int
	// Failed are the sandboxes left running because their suspend or
	// termination failed (the next start adopts them), with why.
	Failed map[string]string
}

func (r ShutdownReport) String() string {
	s := fmt.Sprintf("%d suspended, %d terminated, %d left running", r.Suspended, r.Terminated, r.Kept+len(r.Failed))
	if len(r.Failed) > 0 {
		s += fmt.Sprintf(" (%d because they could not be stopped)", len(r.Failed))
	}
	return s
}

// ValidOnExit checks an on-exit policy.
func ValidOnExit(policy string) error {
	switch policy {
	case OnExitSuspend, OnExitKeep, OnExitTerminate:
		return nil
	}
	return errdefs.InvalidArgument("on-exit: %q is not suspend, keep or terminate", policy)
}

// startsWait bounds how long Shutdown waits for the creates and resumes
// under way (each is bounded by its own steps' timeouts; this is a
// backstop).
const startsWait = 3 * time.Minute

// errStopping refuses a start once Shutdown has begun.
func errStopping() error {
	return errdefs.RetryAfter(errdefs.Unavailable("the daemon is stopping; try again once it is back"), 5*time.Second)
}

// beginStart counts a create or resume under way; done must be called
// when it ends. Once Shutdown has begun it refuses (503), so nothing starts
// a sandbox behind the on-exit policy's back.
func (m *Manager) beginStart() (done func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return nil, errStopping()
	}
	m.starting++
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			m.starting--
			m.startsDone.Broadcast()
			m.mu.Unlock()
		})
	}, nil
}

// stopStarts refuses new creates and resumes (pool refills, background
// work and requests alike) and waits, up to wait, for those under way.
// It returns how many were still running when it gave up.
func (m *Manager) stopStarts(wait time.Duration) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closing = true
	timer := time.AfterFunc(wait, func() {
		m.mu.Lock()
		m.startsDone.Broadcast()
		m.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(wait)
	for m.starting > 0 && time.Now().Before(deadline) {
		m.startsDone.Wait()
	}
	return m.starting
}

// StopStarting refuses new creates and resumes from now on (they answer
// 503; pool refills stop) and waits, up to a few minutes, for those under
// way. Shutdown does this first too; a daemon calls it earlier to say how
// many sandboxes its policy will find.
func (m *Manager) StopStarting() {
	if n := m.stopStarts(startsWait); n > 0 {
		m.log.Warn("stopping: creates or resumes still under way", "count", n, "waited", startsWait)
	}
}

// Shutdown applies the on-exit policy to every running sandbox. First it
// stops everything that starts sandboxes (pool refills, creates and
// resumes, which then answer 503) and waits for those under way, so the
// policy sees every sandbox there is. A named session whose suspend fails
// (no CRIU here, a state CRIU refuses) is left running rather than lost.
func (m *Manager) Shutdown(ctx context.Context, policy string) ShutdownReport {
	rep := ShutdownReport{Failed: map[string]string{}}
	m.StopStarting()
	m.mu.Lock()
	ls := make([]*live, 0, len(m.live))
	for _, l := range m.live {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	if policy == OnExitKeep {
		rep.Kept = len(ls)
		return rep
	}
	ctx = tenant.Unscoped(ctx)
	canSuspend := m.criuAvailable()
	var mu sync.Mutex
	sem := make(chan struct{}, shutdownParallel)
	var wg sync.WaitGroup
	for _, l := range ls {
		l.mu.Lock()
		keep := (l.name != "" || l.keepOnIdle) && !l.pooled && policy == OnExitSuspend
		l.mu.Unlock()
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := func() (err error) {
				defer recoverTo(m.log, &err, "shutdown")
				switch {
				case keep && !canSuspend:
					return errors.New("memory snapshots are unavailable on this host")
				case keep:
					_, err = m.Suspend(ctx, l.id, reasonShutdown)
					if errors.Is(err, errdefs.ErrFailedPrecondition) {
						err = nil // no longer running: suspended or ended meanwhile
					}
					return err
				}
				_, err = m.terminate(ctx, l.id, reasonShutdown, lockOpts{Preempt: true})
				return err
			}()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				rep.Failed[l.id] = err.Error()
				m.log.Error("on exit", "sandbox", l.id, "policy", policy, "err", err)
			case keep:
				rep.Suspended++
			default:
				rep.Terminated++
			}
		}()
	}
	wg.Wait()
	return rep
}
