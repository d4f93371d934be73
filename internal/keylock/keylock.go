// Package keylock is a set of named locks whose waits are always bounded:
// by the waiter's context and by a ceiling, past which the waiter gets an
// errdefs.Busy error that names the operation holding the lock and for how
// long. A holder gets a context of its own that a preempting waiter (a
// delete, say) can cancel, so an operation that must win does not queue
// behind one that may take long.
//
// Lifecycle of one lock: Lock → (the holder works with the returned
// context) → unlock, on every path (defer it). Entries exist only while
// someone holds or waits for them.
package keylock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// Map is a set of locks by key. The zero value is not usable: use New.
type Map struct {
	noun    string
	wait    time.Duration
	preempt func(key, op string) error

	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	sem  chan struct{} // a token while held
	refs int           // holder and waiters; guarded by Map.mu

	mu     sync.Mutex // the holder's fields
	op     string
	since  time.Time
	cancel context.CancelCauseFunc
	firm   bool // the holder cannot be preempted (Options.Firm)
}

// New returns a Map whose waits last at most wait. noun names what a key
// is in errors ("sandbox", "conversation"); preempted gives the cause a
// preempted holder's context is cancelled with (nil: a generic one).
func New(noun string, wait time.Duration, preempted func(key, op string) error) *Map {
	if preempted == nil {
		preempted = func(key, op string) error {
			return errdefs.FailedPrecondition("the %s on %s %s was cancelled by another operation", op, noun, key)
		}
	}
	return &Map{noun: noun, wait: wait, preempt: preempted, m: map[string]*entry{}}
}

// SetWait changes the ceiling of later waits (zero or less: unchanged).
func (m *Map) SetWait(d time.Duration) {
	if d > 0 {
		m.mu.Lock()
		m.wait = d
		m.mu.Unlock()
	}
}

// Options tune one Lock.
type Options struct {
	// Preempt cancels the current holder's context before waiting, unless
	// that holder is Firm: then it is waited out.
	Preempt bool
	// Firm holders are never preempted: an operation that must not stop
	// half way, such as a delete (of two deletes of one sandbox, the first
	// finishes and the second then finds it gone).
	Firm bool
	// Wait overrides the Map's ceiling; negative: do not wait at all.
	Wait time.Duration
}

// Lock takes the lock of key for op. The returned context carries ctx's
// values but not its cancellation (a client that goes away does not cut an
// operation short and leave it half done); it is cancelled when a
// preempting Lock arrives, with the Map's preemption error as its cause.
// unlock is idempotent and must be called on every path.
func (m *Map) Lock(ctx context.Context, key, op string, o Options) (opCtx context.Context, unlock func(), err error) {
	m.mu.Lock()
	e := m.m[key]
	if e == nil {
		e = &entry{sem: make(chan struct{}, 1)}
		m.m[key] = e
	}
	e.refs++
	wait := m.wait
	m.mu.Unlock()
	if o.Wait != 0 {
		wait = o.Wait
	}
	drop := func() {
		m.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(m.m, key)
		}
		m.mu.Unlock()
	}
	if o.Preempt {
		e.mu.Lock()
		if e.cancel != nil && !e.firm {
			e.cancel(m.preempt(key, e.op))
		}
		e.mu.Unlock()
	}
	select {
	case e.sem <- struct{}{}:
	default:
		if wait < 0 {
			drop()
			return nil, nil, m.busy(e, key, op)
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case e.sem <- struct{}{}:
		case <-ctx.Done():
			drop()
			return nil, nil, fmt.Errorf("waiting for %s %s: %w", m.noun, key, context.Cause(ctx))
		case <-t.C:
			drop()
			return nil, nil, m.busy(e, key, op)
		}
	}
	opCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	e.mu.Lock()
	e.op, e.since, e.cancel, e.firm = op, time.Now(), cancel, o.Firm
	e.mu.Unlock()
	var once sync.Once
	return opCtx, func() {
		once.Do(func() {
			e.mu.Lock()
			e.op, e.cancel, e.firm = "", nil, false
			e.mu.Unlock()
			cancel(nil)
			<-e.sem
			drop()
		})
	}, nil
}

func (m *Map) busy(e *entry, key, op string) error {
	e.mu.Lock()
	holder, since := e.op, e.since
	e.mu.Unlock()
	if holder == "" {
		return errdefs.Busy("%s %s is busy with another operation; the %s did not start: try again", m.noun, key, op)
	}
	return errdefs.Busy("%s %s is busy: a %s has held it for %s; the %s did not start: try again when it ends",
		m.noun, key, holder, time.Since(since).Round(100*time.Millisecond), op)
}

// Len is the number of keys held or waited for (for tests and leak checks).
func (m *Map) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}
