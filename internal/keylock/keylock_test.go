package keylock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestBusyAfterCeilingNamesHolder(t *testing.T) {
	m := New("sandbox", 50*time.Millisecond, nil)
	_, unlock, err := m.Lock(context.Background(), "a", "suspend", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	start := time.Now()
	_, _, err = m.Lock(context.Background(), "a", "checkpoint", Options{})
	if !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("second lock: %v, want busy", err)
	}
	if !strings.Contains(err.Error(), "a suspend has held it") || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("busy message does not name holder and op: %q", err)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatalf("gave up before the ceiling")
	}
	// Other keys are independent.
	_, u2, err := m.Lock(context.Background(), "b", "create", Options{})
	if err != nil {
		t.Fatal(err)
	}
	u2()
}

func TestNoWaitAndContextEnd(t *testing.T) {
	m := New("sandbox", time.Hour, nil)
	_, unlock, _ := m.Lock(context.Background(), "a", "resume", Options{})
	defer unlock()
	if _, _, err := m.Lock(context.Background(), "a", "delete", Options{Wait: -1}); !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("no-wait lock: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := m.Lock(ctx, "a", "exec", Options{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock with an ending context: %v", err)
	}
}

func TestPreemptCancelsHolderWithCause(t *testing.T) {
	cause := errdefs.FailedPrecondition("deleted")
	m := New("sandbox", time.Second, func(key, op string) error { return cause })
	hctx, hunlock, err := m.Lock(context.Background(), "a", "suspend", Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The holder works until its context ends, then unwinds.
	go func() {
		<-hctx.Done()
		hunlock()
	}()
	dctx, dunlock, err := m.Lock(context.Background(), "a", "delete", Options{Preempt: true})
	if err != nil {
		t.Fatalf("preempting lock: %v", err)
	}
	defer dunlock()
	if got := context.Cause(hctx); got != cause {
		t.Fatalf("holder's cause: %v", got)
	}
	if dctx.Err() != nil {
		t.Fatalf("the new holder's context is already done")
	}
}

// Two deletes of one sandbox: the second must not cancel the first half way
// (it answered 500 "context canceled"); it waits the first out.
func TestPreemptWaitsOutFirmHolder(t *testing.T) {
	m := New("sandbox", 5*time.Second, nil)
	hctx, hunlock, err := m.Lock(context.Background(), "a", "delete", Options{Preempt: true, Firm: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, unlock, err := m.Lock(context.Background(), "a", "delete", Options{Preempt: true, Firm: true})
		if err == nil {
			unlock()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("second delete got the lock while the first held it: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if hctx.Err() != nil {
		t.Fatalf("the first delete was cancelled: %v", context.Cause(hctx))
	}
	hunlock()
	if err := <-done; err != nil {
		t.Fatalf("second delete after the first ended: %v", err)
	}
	// The lock is plain again: a later holder can be preempted.
	sctx, sunlock, _ := m.Lock(context.Background(), "a", "suspend", Options{})
	defer sunlock()
	go func() { <-sctx.Done(); sunlock() }()
	_, dunlock, err := m.Lock(context.Background(), "a", "delete", Options{Preempt: true})
	if err != nil {
		t.Fatalf("delete after a suspend: %v", err)
	}
	dunlock()
	if sctx.Err() == nil {
		t.Fatal("a suspend was not preempted by a delete")
	}
}

func TestClientCancelDoesNotEndOperation(t *testing.T) {
	m := New("sandbox", time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	opCtx, unlock, err := m.Lock(ctx, "a", "checkpoint", Options{})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if opCtx.Err() != nil {
		t.Fatal("the operation's context ended with the client's")
	}
	unlock()
	if opCtx.Err() == nil {
		t.Fatal("the operation's context lives on after unlock")
	}
}

func TestEntriesAreFreedAndExclusive(t *testing.T) {
	m := New("sandbox", 10*time.Second, nil)
	var mu sync.Mutex
	inside, maxInside := 0, 0
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			key := []string{"a", "b"}[i%2]
			_, unlock, err := m.Lock(context.Background(), key, "op", Options{})
			if err != nil {
				t.Error(err)
				return
			}
			defer unlock()
			if key == "a" {
				mu.Lock()
				inside++
				maxInside = max(maxInside, inside)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				inside--
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if maxInside != 1 {
		t.Fatalf("%d holders of one key at once", maxInside)
	}
	if n := m.Len(); n != 0 {
		t.Fatalf("%d entries left after every unlock", n)
	}
	_, unlock, _ := m.Lock(context.Background(), "a", "op", Options{})
	unlock()
	unlock() // idempotent
	if n := m.Len(); n != 0 {
		t.Fatalf("%d entries after a double unlock", n)
	}
}
