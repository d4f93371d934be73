package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
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

// startWatch starts a watch and returns once the agent confirmed it: its
// events, the cancel that ends it, and where its end is told.
func startWatch(t *testing.T, c *testAgent, p string, recursive bool) (*watchLog, context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := &watchLog{started: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, p, recursive, log.add) }()
	select {
	case <-log.started:
	case err := <-done:
		t.Fatalf("watch ended before it started: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not start")
	}
	return log, cancel, done
}

// endWatch waits for the end of a cancelled watch.
func endWatch(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end with its context")
	}
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
	log, cancel, done := startWatch(t, c, "/w", true)
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
	endWatch(t, done)
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

// TestWatchOps: a plain watch reports chmods and its own removal and not
// what happens below its subdirectories; the agent's own write lands as a
// create and a write of its name, its temp file unseen; a watch of / names
// changes from there.
func TestWatchOps(t *testing.T) {
	c, root := startAgent(t)
	ctx := context.Background()
	makeTree(t, root, map[string]string{"w/sub/": "", "w/f": "x"})
	w := filepath.Join(root, "w")
	log, cancel, done := startWatch(t, c, "/w", false)
	rootLog, _, _ := startWatch(t, c, "/", true)
	if err := os.Chmod(filepath.Join(w, "f"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "chmod f", func() bool { return log.has("f", "chmod") })
	if _, _, err := c.WriteFile(ctx, "/w/put.txt", 0, strings.NewReader("via the agent")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "create and write of put.txt", func() bool { return log.has("put.txt", "create") && log.has("put.txt", "write") })
	waitFor(t, "w/put.txt from /", func() bool { return rootLog.has("w/put.txt", "write") })
	if err := os.WriteFile(filepath.Join(w, "sub", "deep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "w/sub/deep from /", func() bool { return rootLog.has("w/sub/deep", "create") })
	if err := os.RemoveAll(w); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "removal of the watched directory", func() bool { return log.has("", "remove") })
	log.mu.Lock()
	for _, e := range log.events {
		if strings.HasPrefix(e.Name, "sub/") || tempFileRE.MatchString(e.Name) {
			t.Errorf("event %+v", e)
		}
	}
	log.mu.Unlock()
	cancel()
	endWatch(t, done)
}

// TestWatchLimit: at most maxWatches watches run at once; one whose client
// went away is let go, and its place taken.
func TestWatchLimit(t *testing.T) {
	c, root := startAgent(t)
	makeTree(t, root, map[string]string{"w/": ""})
	var cancels []context.CancelFunc
	var dones []<-chan error
	for range maxWatches {
		_, cancel, done := startWatch(t, c, "/w", false)
		cancels = append(cancels, cancel)
		dones = append(dones, done)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wantKind(t, "one watch too many", c.Watch(ctx, "/w", false, func(wire.WatchEvent) {}), errdefs.ErrResourceExhausted)
	for i, cancel := range cancels {
		cancel()
		endWatch(t, dones[i])
	}
	waitFor(t, "the end of the watches", func() bool { return activeWatches.Load() == 0 })
	_, cancel, done := startWatch(t, c, "/w", false)
	cancel()
	endWatch(t, done)
}

// TestWatchCancelledAtOnce: a watch whose client goes away as soon as it
// started ends at once, not at its next keepalive.
func TestWatchCancelledAtOnce(t *testing.T) {
	c, root := startAgent(t)
	makeTree(t, root, map[string]string{"w/": ""})
	for range 20 {
		start := time.Now()
		_, cancel, done := startWatch(t, c, "/w", false)
		cancel()
		endWatch(t, done)
		waitFor(t, "the watch's end in the agent", func() bool { return activeWatches.Load() == 0 })
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("a cancelled watch took %s to end", d)
		}
	}
}
