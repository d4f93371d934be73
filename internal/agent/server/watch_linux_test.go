package server

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
)

type watchLog struct {
	mu      sync.Mutex
	events  []wire.WatchEvent
	started chan struct{}
	once    sync.Once
}

func (l *watchLog) add(ev wire.WatchEvent) {
	if ev.Started {
		l.once.Do(func() { close(l.started) })
		return
	}
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
}

func (l *watchLog) has(name, op string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if e.Name == name && e.Op == op {
			return true
		}
	}
	return false
}

// A recursive watch reports creates, writes, removes and renames, in new
// subdirectories too; a symlink in the tree is not followed into.
func TestWatch(t *testing.T) {
	c, root := startAgent(t)
	w := filepath.Join(root, "w")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{w, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/outside", filepath.Join(w, "link")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &watchLog{started: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, "/w", true, log.add) }()
	select {
	case <-log.started:
	case err := <-done:
		t.Fatalf("watch ended before it started: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not start")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(w, "a.txt"), []byte("x"), 0o644))
	waitFor(t, "create a.txt", func() bool { return log.has("a.txt", "create") })
	waitFor(t, "write a.txt", func() bool { return log.has("a.txt", "write") })
	must(os.Mkdir(filepath.Join(w, "sub"), 0o755))
	waitFor(t, "create sub", func() bool { return log.has("sub", "create") })
	// The new directory is watched too (once the agent has added it).
	waitFor(t, "a watched sub", func() bool {
		os.WriteFile(filepath.Join(w, "sub", "b.txt"), []byte("y"), 0o644)
		return log.has("sub/b.txt", "write")
	})
	must(os.Rename(filepath.Join(w, "a.txt"), filepath.Join(w, "c.txt")))
	waitFor(t, "rename a.txt", func() bool { return log.has("a.txt", "rename") && log.has("c.txt", "create") })
	must(os.Remove(filepath.Join(w, "c.txt")))
	waitFor(t, "remove c.txt", func() bool { return log.has("c.txt", "remove") })
	// Through the symlink: nothing (the link's target is not watched).
	must(os.WriteFile(filepath.Join(outside, "o.txt"), []byte("z"), 0o644))
	time.Sleep(200 * time.Millisecond)
	if log.has("link/o.txt", "create") || log.has("o.txt", "create") {
		t.Fatal("a change beyond a symlink was reported")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not end with its context")
	}
}

// Watching what is not a readable directory fails at once.
func TestWatchRefused(t *testing.T) {
	c, root := startAgent(t)
	if err := os.WriteFile(filepath.Join(root, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/nope", "/file", "bad\x00path"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Watch(ctx, p, false, func(wire.WatchEvent) { t.Errorf("an event for %q", p) })
		cancel()
		if err == nil {
			t.Errorf("watching %q: no error", p)
		}
	}
}
