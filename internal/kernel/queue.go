package kernel

import (
	"context"
	"sync"
)

// fifo hands a kernel to one caller at a time, strictly in the order callers
// asked for it (a sync.Mutex promises no order). Restart jumps the queue so
// that cells waiting behind it run on the new kernel.
type fifo struct {
	mu      sync.Mutex
	busy    bool
	waiters []chan struct{}
}

// enqueue takes a place in the queue (at its head when front) and returns the
// channel that is closed when the caller's turn comes; it is closed already
// when the queue was free.
func (q *fifo) enqueue(front bool) chan struct{} {
	ch := make(chan struct{})
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case !q.busy:
		q.busy = true
		close(ch)
	case front:
		q.waiters = append([]chan struct{}{ch}, q.waiters...)
	default:
		q.waiters = append(q.waiters, ch)
	}
	return ch
}

// wait blocks until turn is closed or ctx ends. On ctx's end the place is
// given up (and passed on if the turn came at the same moment).
func (q *fifo) wait(ctx context.Context, turn chan struct{}) error {
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	for i, w := range q.waiters {
		if w == turn {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			q.mu.Unlock()
			return ctx.Err()
		}
	}
	q.mu.Unlock()
	q.release() // our turn came as ctx ended: pass it on
	return ctx.Err()
}

func (q *fifo) acquire(ctx context.Context) error { return q.wait(ctx, q.enqueue(false)) }

// release ends the current turn and starts the next.
func (q *fifo) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiters) == 0 {
		q.busy = false
		return
	}
	next := q.waiters[0]
	q.waiters = q.waiters[1:]
	close(next)
}
