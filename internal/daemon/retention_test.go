package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The retention job prunes, from its start, the records of sandboxes
// terminated longer ago than RetainTerminated, for every tenant, keeps the
// others, says how many it removed, and stops with the daemon's
// background work; a retention of 0 starts no job.
func TestRetentionPrunesAtStart(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "forkbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	old, recent := now.Add(-49*time.Hour), now.Add(-47*time.Hour)
	for _, sb := range []*store.Sandbox{
		{ID: "sbx_old", Tenant: "acme", State: api.StateTerminated, TerminatedAt: &old},
		{ID: "sbx_old2", Tenant: "default", State: api.StateTerminated, TerminatedAt: &old},
		{ID: "sbx_recent", Tenant: "acme", State: api.StateTerminated, TerminatedAt: &recent},
		{ID: "sbx_live", Tenant: "acme", State: api.StateRunning},
	} {
		sb.CreatedAt, sb.LastActiveAt = old.Add(-time.Hour), old.Add(-time.Hour)
		if err := st.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}

	var logs syncBuffer
	bg, cancel := context.WithCancel(ctx)
	d := &Daemon{cfg: Config{RetainTerminated: 0}, store: st, log: slog.New(slog.NewTextHandler(&logs, nil)), bgCtx: bg, bgCancel: cancel}
	d.startRetention()
	d.bg.Wait() // none started
	if _, err := st.Get(ctx, "sbx_old"); err != nil {
		t.Fatalf("a retention of 0 pruned: %v", err)
	}

	d.cfg.RetainTerminated = 48 * time.Hour
	d.startRetention()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err1 := st.Get(ctx, "sbx_old")
		_, err2 := st.Get(ctx, "sbx_old2")
		if errors.Is(err1, errdefs.ErrNotFound) && errors.Is(err2, errdefs.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old terminated records still there after 10 s: %v, %v", err1, err2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	d.bg.Wait()
	for _, id := range []string{"sbx_recent", "sbx_live"} {
		if _, err := st.Get(ctx, id); err != nil {
			t.Errorf("%s was pruned: %v", id, err)
		}
	}
	if out := logs.String(); !strings.Contains(out, "pruned terminated sandboxes' records") || !strings.Contains(out, "removed=2") {
		t.Errorf("the prune was not logged with its count:\n%s", out)
	}
}
