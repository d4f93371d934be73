package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

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

// Shutdown applies the on-exit policy to every running sandbox. A named
// session whose suspend fails (no CRIU here, a state CRIU refuses) is left
// running rather than lost.
func (m *Manager) Shutdown(ctx context.Context, policy string) ShutdownReport {
	rep := ShutdownReport{Failed: map[string]string{}}
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
