package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/keylock"
	"golang.org/x/sync/semaphore"
)

// Two locks keep operations on one sandbox apart, and neither is ever waited
// on without a bound:
//
//   - the lifecycle lock (lockOp, a keylock.Map) serializes the operations
//     that change what a sandbox is: create, suspend, resume, checkpoint,
//     delete. A waiter gives up when its request ends or after the daemon's
//     lock-wait ceiling (SetLockWait) and answers 409 busy naming the
//     holder. A delete does not queue politely: it cancels the holder's
//     context (the operation unwinds through its deferred cleanups) and then
//     waits for the lock within the same ceiling.
//   - the gate (gate) is held shared by every call into a running sandbox
//     (exec, code, files, contexts) and exclusively by what needs the
//     sandbox to itself (a memory checkpoint, a suspend). It is a weighted
//     semaphore, so a waiting writer keeps new readers out and every wait
//     takes a context.
//
// Lock order: lifecycle lock, then gate. A call never takes a lifecycle
// lock while it holds the gate (acquire resumes a suspended sandbox before
// it takes the gate).

// DefaultLockWait bounds how long an operation waits for a sandbox that
// another operation holds.
const DefaultLockWait = 30 * time.Second

// lockOpts tunes one lifecycle-lock wait.
type lockOpts = keylock.Options

// errPreempted is the cause of an operation cancelled by a delete: a
// failed precondition for its caller, and errDeletedDuring for the
// daemon's own work, for which that is an expected race, not a failure.
func errPreempted(id, op string) error {
	return preemptedError{errdefs.FailedPrecondition("sandbox %s was deleted during the %s", id, op)}
}

// errDeletedDuring marks an operation that a delete cancelled.
var errDeletedDuring = errors.New("deleted during the operation")

type preemptedError struct{ error }

func (e preemptedError) Unwrap() []error { return []error{e.error, errDeletedDuring} }

// lockOp takes the lifecycle lock of sandbox id for op (see keylock.Map.Lock:
// the returned context is not cancelled by the client going away, only by a
// delete, with a failed-precondition cause). unlock must be called on every
// path (defer it).
func (m *Manager) lockOp(ctx context.Context, id, op string, o lockOpts) (context.Context, func(), error) {
	if err := m.settlingErr(id); err != nil {
		return nil, nil, err
	}
	return m.locks.Lock(ctx, id, op, o)
}

// opErr explains an error of an operation whose context a delete may have
// cancelled: then the delete is the reason, not the error it caused.
func opErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		if errors.Is(cause, errdefs.ErrFailedPrecondition) {
			return cause
		}
	}
	return err
}

// gateMax is the gate's capacity: a reader takes 1, a writer all of it.
const gateMax = 1 << 30

// gate is a running sandbox's call gate (see above).
type gate struct {
	sem *semaphore.Weighted

	mu     sync.Mutex
	holder string // what holds it exclusively, for busy errors
}

func newGate() *gate { return &gate{sem: semaphore.NewWeighted(gateMax)} }

// acquire takes the gate shared (exclusive: for op) within wait.
func (g *gate) acquire(ctx context.Context, id, op string, exclusive bool, wait time.Duration) (func(), error) {
	n := int64(1)
	if exclusive {
		n = gateMax
	}
	if !g.sem.TryAcquire(n) {
		wctx, cancel := context.WithTimeout(ctx, wait)
		err := g.sem.Acquire(wctx, n)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("waiting for sandbox %s: %w", id, context.Cause(ctx))
			}
			g.mu.Lock()
			holder := g.holder
			g.mu.Unlock()
			if holder == "" {
				holder = "calls in flight"
			} else {
				holder = "a " + holder
			}
			return nil, errdefs.Busy("sandbox %s is busy: %s did not end within %s; try again", id, holder, wait)
		}
	}
	if exclusive {
		g.mu.Lock()
		g.holder = op
		g.mu.Unlock()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if exclusive {
				g.mu.Lock()
				g.holder = ""
				g.mu.Unlock()
			}
			g.sem.Release(n)
		})
	}, nil
}
