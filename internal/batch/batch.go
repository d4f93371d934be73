// Package batch writes records in batches from one goroutine: callers add
// without waiting for a write (a durable, fsynced write per call would slow
// every call down), and a reader that must see everything added so far
// flushes first. A crash loses at most the last interval's records.
package batch

import (
	"context"
	"sync"
	"time"
)

// Writer buffers records of type T and hands them to its write function in
// batches: every interval, or as soon as size are waiting.
type Writer[T any] struct {
	write    func(context.Context, []T) error
	onErr    func(n int, err error)
	size     int
	interval time.Duration
	// tick runs after each periodic flush (housekeeping such as pruning);
	// nil: nothing.
	tick func()

	mu   sync.Mutex
	buf  []T
	wake chan struct{}
	done chan struct{}
	// flushMu serializes writes, so that Flush returns after what it took
	// is stored.
	flushMu   sync.Mutex
	closeOnce sync.Once
	exited    chan struct{}
}

// Config says how a Writer writes.
type Config[T any] struct {
	// Write stores a batch; an error keeps the batch for the next try.
	Write func(context.Context, []T) error
	// OnError is told of a failed write (n records kept); nil: ignored.
	OnError func(n int, err error)
	// Size is the most records that wait for the interval (default 256).
	Size int
	// Interval is how often buffered records are written (default 200 ms).
	Interval time.Duration
	// Tick runs after each periodic flush; nil: nothing.
	Tick func()
}

// New starts a Writer; Close stops it.
func New[T any](c Config[T]) *Writer[T] {
	w := &Writer[T]{write: c.Write, onErr: c.OnError, size: c.Size, interval: c.Interval, tick: c.Tick,
		wake: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
	if w.size <= 0 {
		w.size = 256
	}
	if w.interval <= 0 {
		w.interval = 200 * time.Millisecond
	}
	go w.run()
	return w
}

// Add queues r for the next write.
func (w *Writer[T]) Add(r T) {
	w.mu.Lock()
	w.buf = append(w.buf, r)
	n := len(w.buf)
	w.mu.Unlock()
	if n >= w.size {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *Writer[T]) run() {
	defer close(w.exited)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			w.Flush()
			return
		case <-t.C:
		case <-w.wake:
		}
		w.Flush()
		if w.tick != nil {
			w.tick()
		}
	}
}

// Flush writes what is buffered now, and returns once it is stored (or
// its write failed; the records are then kept for the next try).
func (w *Writer[T]) Flush() {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	w.mu.Lock()
	b := w.buf
	w.buf = nil
	w.mu.Unlock()
	if len(b) == 0 {
		return
	}
	if err := w.write(context.Background(), b); err != nil {
		if w.onErr != nil {
			w.onErr(len(b), err)
		}
		w.mu.Lock()
		w.buf = append(b, w.buf...)
		w.mu.Unlock()
	}
}

// Close writes what is buffered and stops the writer.
func (w *Writer[T]) Close() {
	w.closeOnce.Do(func() { close(w.done) })
	<-w.exited
}
