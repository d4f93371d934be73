package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// The gate of a running sandbox: calls share it, a checkpoint or suspend
// takes it alone, and no wait on it is unbounded.
func TestGateBoundsEveryWait(t *testing.T) {
	g := newGate()
	ctx := context.Background()
	call, err := g.acquire(ctx, "sbx_a", "", false, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Another call shares it.
	call2, err := g.acquire(ctx, "sbx_a", "", false, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	call2()
	// An exclusive holder waits for the call in flight, within its bound.
	_, err = g.acquire(ctx, "sbx_a", "suspend", true, 30*time.Millisecond)
	if !errors.Is(err, errdefs.ErrBusy) || !strings.Contains(err.Error(), "calls in flight") {
		t.Fatalf("exclusive behind a call: %v", err)
	}
	call()
	suspend, err := g.acquire(ctx, "sbx_a", "suspend", true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// While it is held alone, calls wait (boundedly) and are told why.
	_, err = g.acquire(ctx, "sbx_a", "", false, 30*time.Millisecond)
	if !errors.Is(err, errdefs.ErrBusy) || !strings.Contains(err.Error(), "a suspend") {
		t.Fatalf("call behind a suspend: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := g.acquire(cctx, "sbx_a", "", false, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("call with a cancelled context: %v", err)
	}
	// A call waiting when the holder leaves gets in.
	got := make(chan error, 1)
	go func() {
		rel, err := g.acquire(ctx, "sbx_a", "", false, 5*time.Second)
		if err == nil {
			rel()
		}
		got <- err
	}()
	time.Sleep(10 * time.Millisecond)
	suspend()
	suspend() // idempotent
	if err := <-got; err != nil {
		t.Fatalf("waiting call: %v", err)
	}
}
