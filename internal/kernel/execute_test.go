package kernel

import (
	"errors"
	"testing"
	"time"
)

// TestSendFailedOnDeath: a cell whose request could not be sent because
// the kernel died meanwhile ends as KernelDied (with the death's reason),
// like a death later in the cell; a send that fails while the kernel lives
// is the caller's error.
func TestSendFailedOnDeath(t *testing.T) {
	sendErr := errors.New("send execute_request: context canceled")

	p := &proc{dead: make(chan struct{})}
	go func() {
		time.Sleep(20 * time.Millisecond)
		p.mu.Lock()
		p.exit = &ExitInfo{Code: 1}
		p.mu.Unlock()
		close(p.dead)
	}()
	var events []Event
	c := &cell{ex: newExecution(), onEvent: func(e Event) { events = append(events, e) }}
	ex, err := c.sendFailed(p, sendErr)
	if err != nil || ex == nil || ex.Error == nil || ex.Error.Name != "KernelDied" || ex.Error.Value != "the kernel exited with code 1" {
		t.Fatalf("a death with the request in flight: %+v, %v", ex, err)
	}
	if len(events) != 1 || events[0].Type != "error" {
		t.Fatalf("events: %+v", events)
	}

	alive := &proc{dead: make(chan struct{})}
	c = &cell{ex: newExecution()}
	if ex, err := c.sendFailed(alive, sendErr); ex != nil || !errors.Is(err, sendErr) {
		t.Fatalf("a send that failed while the kernel lives: %+v, %v", ex, err)
	}
}
