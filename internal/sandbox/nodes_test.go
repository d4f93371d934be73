package sandbox

import (
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

// nodeManager is a Manager of node id over a store of its own, with rows.
func nodeManager(t *testing.T, id string, rows ...*store.Sandbox) (*Manager, store.Store) {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Now().UTC()
	for _, sb := range rows {
		sb.CreatedAt, sb.LastActiveAt = now, now
		if err := st.Create(context.Background(), sb); err != nil {
			t.Fatal(err)
		}
	}
	m := &Manager{store: st, defaults: DefaultDefaults, log: slog.Default(), now: time.Now}
	m.SetNode(id)
	return m, st
}

func rowOf(t *testing.T, st store.Store, id string) *store.Sandbox {
	t.Helper()
	sb, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// A down node's running sandboxes become lost, or (policy resume, with a
// suspend image) this node's and suspended; other rows are left alone.
func TestNodeLost(t *testing.T) {
	for _, resume := range []bool{false, true} {
		m, st := nodeManager(t, "b",
			&store.Sandbox{ID: "run_img", State: api.StateRunning, Node: "a", SuspendImage: "snap_1"},
			&store.Sandbox{ID: "run", State: api.StateRunning, Node: "a"},
			&store.Sandbox{ID: "creating", State: api.StateCreating, Node: "a", SuspendImage: "snap_2"},
			&store.Sandbox{ID: "susp", State: api.StateSuspended, Node: "a", SuspendImage: "snap_3"},
			&store.Sandbox{ID: "other", State: api.StateRunning, Node: "c"},
			&store.Sandbox{ID: "mine", State: api.StateRunning, Node: "b"},
			&store.Sandbox{ID: "legacy", State: api.StateRunning},
		)
		hb := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
		lost, resumable, err := m.NodeLost(context.Background(), "a", hb, resume)
		if err != nil {
			t.Fatal(err)
		}
		wantLost, wantResumable := 3, 0
		if resume {
			wantLost, wantResumable = 2, 1
		}
		if lost != wantLost || resumable != wantResumable {
			t.Fatalf("resume=%v: lost %d resumable %d, want %d and %d", resume, lost, resumable, wantLost, wantResumable)
		}
		r := rowOf(t, st, "run_img")
		if resume {
			if r.State != api.StateSuspended || r.Node != "b" || !strings.Contains(r.StateReason, "node a") {
				t.Fatalf("resume policy: %+v", r)
			}
		} else if r.State != api.StateLost || r.Node != "a" || !strings.Contains(r.StateReason, "2026-12-02T06:00:00Z") {
			t.Fatalf("report policy: %+v", r)
		}
		for id, want := range map[string]api.SandboxState{"run": api.StateLost, "creating": api.StateLost, "susp": api.StateSuspended,
			"other": api.StateRunning, "mine": api.StateRunning, "legacy": api.StateRunning} {
			if got := rowOf(t, st, id).State; got != want {
				t.Errorf("resume=%v: %s is %s, want %s", resume, id, got, want)
			}
		}
		// Settling again changes nothing (another node got there first).
		if lost, resumable, err := m.NodeLost(context.Background(), "a", hb, resume); err != nil || lost+resumable != 0 {
			t.Fatalf("second settle: %d %d %v", lost, resumable, err)
		}
		// Nothing of this node's own, ever.
		if lost, _, _ := m.NodeLost(context.Background(), "b", hb, resume); lost != 0 {
			t.Fatal("a node settled its own sandboxes")
		}
	}
}

// Adopt takes a suspended session of a down node once, whoever races for it.
func TestAdopt(t *testing.T) {
	st0, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st0.Close() })
	now := time.Now().UTC()
	for _, sb := range []*store.Sandbox{
		{ID: "susp", State: api.StateSuspended, Node: "a", SuspendImage: "snap_1"},
		{ID: "run", State: api.StateRunning, Node: "a"},
	} {
		sb.CreatedAt, sb.LastActiveAt = now, now
		if err := st0.Create(context.Background(), sb); err != nil {
			t.Fatal(err)
		}
	}
	managers := []*Manager{}
	for _, id := range []string{"b", "c", "d"} {
		m := &Manager{store: st0, defaults: DefaultDefaults, log: slog.Default(), now: time.Now}
		m.SetNode(id)
		managers = append(managers, m)
	}
	var wg sync.WaitGroup
	for _, m := range managers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Adopt(context.Background(), "susp", "a"); err != nil {
				t.Errorf("adopt by %s: %v", m.node, err)
			}
		}()
	}
	wg.Wait()
	r := rowOf(t, st0, "susp")
	if r.State != api.StateSuspended || (r.Node != "b" && r.Node != "c" && r.Node != "d") {
		t.Fatalf("after the race: %+v", r)
	}
	winner := r.Node
	// The others see it elsewhere now: their guards refuse to act on it.
	for _, m := range managers {
		if m.node == winner {
			continue
		}
		if !m.elsewhere(r) {
			t.Errorf("%s does not see %s's sandbox as elsewhere", m.node, winner)
		}
		if _, err := m.setState(context.Background(), "susp", api.StateResuming, "", nil); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("%s resumed %s's sandbox: %v", m.node, winner, err)
		}
	}
	// A running sandbox is not adopted.
	if err := managers[0].Adopt(context.Background(), "run", "a"); err != nil {
		t.Fatal(err)
	}
	if r := rowOf(t, st0, "run"); r.Node != "a" || r.State != api.StateRunning {
		t.Fatalf("running sandbox adopted: %+v", r)
	}
	// A single daemon adopts nothing.
	solo := &Manager{store: st0, log: slog.Default()}
	if err := solo.Adopt(context.Background(), "susp", winner); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("adopt without a node id: %v", err)
	}
	if solo.elsewhere(r) {
		t.Fatal("a single daemon sees a row as another node's")
	}
}
