package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
)

// PoolReadyLabel marks a warm pool's sandbox that is ready to be claimed;
// the claim race below removes it the way a daemon claims one.
const PoolReadyLabel = "forkbox.pool.ready"

// RunConcurrent holds several instances of a backend, opened independently
// on one database as several daemons would, to the store's contract while
// they race. newInstances returns n instances on a fresh, empty database
// each time it is called (once per subtest) and arranges for their closing
// with t.Cleanup.
func RunConcurrent(t *testing.T, newInstances func(t *testing.T, n int) []store.Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, ss []store.Backend)
	}{
		{"CreateSameLiveName", testRaceCreateName},
		{"UpdateNoLostUpdate", testRaceUpdate},
		{"ClaimOnce", testRaceClaim},
		{"AppendCellsSeq", testRaceCells},
		{"AppendTurnSeq", testRaceTurns},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newInstances(t, raceInstances)) })
	}
}

const (
	raceInstances = 4 // daemons
	raceWorkers   = 8 // goroutines, spread over the daemons
)

// race runs fn(i, s) in raceWorkers goroutines at once, worker i on
// instance i mod len(ss), and returns their errors by worker.
func race(ss []store.Backend, fn func(i int, s store.Backend) error) []error {
	errs := make([]error, raceWorkers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range raceWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = fn(i, ss[i%len(ss)])
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

func raceCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Every daemon creates a sandbox under one name at once: exactly one
// succeeds, the others are refused with ErrConflict and leave nothing.
func testRaceCreateName(t *testing.T, ss []store.Backend) {
	ctx := raceCtx(t)
	errs := race(ss, func(i int, s store.Backend) error {
		return s.Create(ctx, newSandbox(fmt.Sprintf("sb-%d", i), "shared", api.StateCreating, at(i)))
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("workers %d and %d both created a live sandbox named shared", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, errdefs.ErrConflict):
			t.Errorf("worker %d: err = %v, want ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no Create succeeded: %v", errs)
	}
	for _, s := range ss {
		l, err := s.List(ctx, store.ListFilter{})
		if err != nil || len(l) != 1 || l[0].ID != fmt.Sprintf("sb-%d", winner) {
			t.Errorf("List = %v, %v; want only the winner's sandbox", ids(l), err)
		}
	}
	for i := range raceWorkers {
		if ev := mustEvents(t, ss[0], fmt.Sprintf("sb-%d", i)); (i == winner) != (len(ev) == 1) {
			t.Errorf("sb-%d has %d events", i, len(ev))
		}
	}
}

// Every daemon increments counters in one sandbox's record (a label and
// the runtime record) and flips its state: no increment is lost, and the
// state history chains.
func testRaceUpdate(t *testing.T, ss []store.Backend) {
	const rounds = 5
	ctx := raceCtx(t)
	sb := newSandbox("sb-1", "alpha", api.StateRunning, at(1))
	sb.Spec.Labels = map[string]string{"n": "0"}
	sb.Runtime = json.RawMessage(`{"n":0}`)
	mustCreate(t, ss[0], sb)
	errs := race(ss, func(i int, s store.Backend) error {
		for range rounds {
			_, err := s.Update(ctx, "sb-1", func(sb *store.Sandbox) error {
				n, err := strconv.Atoi(sb.Spec.Labels["n"])
				if err != nil {
					return err
				}
				sb.Spec.Labels["n"] = strconv.Itoa(n + 1)
				sb.Spec.Labels[fmt.Sprintf("w%d", i)] = "seen"
				var rt struct{ N int }
				if err := json.Unmarshal(sb.Runtime, &rt); err != nil {
					return err
				}
				sb.Runtime = json.RawMessage(fmt.Sprintf(`{"n":%d}`, rt.N+1))
				if sb.State == api.StateRunning {
					sb.State = api.StateSuspended
				} else {
					sb.State = api.StateRunning
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	total := raceWorkers * rounds
	for k, s := range ss {
		got := mustGet(t, s, "sb-1")
		if n := got.Spec.Labels["n"]; n != strconv.Itoa(total) {
			t.Errorf("instance %d: label counter = %s, want %d (lost updates)", k, n, total)
		}
		var rt struct{ N int }
		if err := json.Unmarshal(got.Runtime, &rt); err != nil || rt.N != total {
			t.Errorf("instance %d: runtime counter = %s (%v), want %d (lost updates)", k, got.Runtime, err, total)
		}
		if len(got.Spec.Labels) != raceWorkers+1 {
			t.Errorf("instance %d: labels = %v, want n and one per worker", k, got.Spec.Labels)
		}
	}
	ev := mustEvents(t, ss[len(ss)-1], "sb-1")
	if len(ev) != total+1 {
		t.Fatalf("events = %d, want %d", len(ev), total+1)
	}
	for i := 1; i < len(ev); i++ {
		if ev[i].From != ev[i-1].To || ev[i].ID <= ev[i-1].ID {
			t.Errorf("event %d (%d, from %q) after event %d (%d, to %q): history does not chain", i, ev[i].ID, ev[i].From, i-1, ev[i-1].ID, ev[i-1].To)
		}
	}
}

// Daemons claim a warm pool's ready sandbox at once: the claim checks and
// removes the ready label inside Update, so exactly one wins each sandbox.
func testRaceClaim(t *testing.T, ss []store.Backend) {
	ctx := raceCtx(t)
	const ready = 3
	for i := range ready {
		sb := newSandbox(fmt.Sprintf("warm-%d", i), "", api.StateRunning, at(i))
		sb.Spec.Labels = map[string]string{PoolReadyLabel: "true"}
		mustCreate(t, ss[0], sb)
	}
	claim := func(i int, s store.Backend, id string) error {
		_, err := s.Update(ctx, id, func(sb *store.Sandbox) error {
			if sb.Spec.Labels[PoolReadyLabel] != "true" {
				return errdefs.FailedPrecondition("sandbox %s is not ready", id)
			}
			delete(sb.Spec.Labels, PoolReadyLabel)
			sb.Spec.Labels["claimed-by"] = strconv.Itoa(i)
			sb.Name = fmt.Sprintf("claimed-%s", id)
			return nil
		})
		return err
	}
	for k := range ready {
		id := fmt.Sprintf("warm-%d", k)
		errs := race(ss, func(i int, s store.Backend) error { return claim(i, s, id) })
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Errorf("%s: workers %d and %d both claimed it", id, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, errdefs.ErrFailedPrecondition):
				t.Errorf("%s: worker %d: err = %v, want fn's ErrFailedPrecondition", id, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("%s: nobody claimed it: %v", id, errs)
		}
		got := mustGet(t, ss[len(ss)-1], id)
		if _, ok := got.Spec.Labels[PoolReadyLabel]; ok || got.Spec.Labels["claimed-by"] != strconv.Itoa(winner) {
			t.Errorf("%s after the race: labels %v, want claimed by %d", id, got.Spec.Labels, winner)
		}
	}
	l, err := ss[0].List(ctx, store.ListFilter{Labels: map[string]string{PoolReadyLabel: "true"}})
	if err != nil || len(l) != 0 {
		t.Errorf("ready sandboxes left: %v, %v", ids(l), err)
	}
}

// Daemons record cells of one sandbox at once: Seq numbers them 1..n
// without a gap or a repeat, in each batch's order.
func testRaceCells(t *testing.T, ss []store.Backend) {
	ctx := raceCtx(t)
	const batches, perBatch = 3, 3
	errs := race(ss, func(i int, s store.Backend) error {
		for b := range batches {
			var cells []store.Cell
			for c := range perBatch {
				cells = append(cells, store.Cell{ID: fmt.Sprintf("c-%d-%d-%d", i, b, c), Tenant: "acme", SandboxID: "sbx_race",
					Source: "user", Language: "python", Code: "pass", Execution: json.RawMessage(`{}`)})
			}
			// A second sandbox in the same batch: batches lock both.
			cells = append(cells, store.Cell{ID: fmt.Sprintf("o-%d-%d", i, b), SandboxID: "sbx_other", Source: "user",
				Code: "pass", Execution: json.RawMessage(`{}`)})
			if err := s.AppendCells(ctx, cells); err != nil {
				return err
			}
			for c := 1; c < perBatch; c++ {
				if cells[c].Seq != cells[c-1].Seq+1 {
					return fmt.Errorf("batch got seqs %d, %d", cells[c-1].Seq, cells[c].Seq)
				}
			}
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	for sbx, n := range map[string]int{"sbx_race": raceWorkers * batches * perBatch, "sbx_other": raceWorkers * batches} {
		got, err := ss[0].ListCells(ctx, sbx)
		if err != nil || len(got) != n {
			t.Fatalf("%s: %d cells, %v; want %d", sbx, len(got), err, n)
		}
		for i, c := range got {
			if c.Seq != i+1 {
				t.Fatalf("%s: cell %d (%s) has seq %d, want %d", sbx, i, c.ID, c.Seq, i+1)
			}
		}
	}
}

// Daemons append turns to one conversation at once: Seq numbers them 1..n.
func testRaceTurns(t *testing.T, ss []store.Backend) {
	ctx := raceCtx(t)
	mustCreateConv(t, ss[0], newConversation("c1", at(1)))
	const rounds = 3
	errs := race(ss, func(i int, s store.Backend) error {
		for r := range rounds {
			if err := s.AppendTurn(ctx, &store.Turn{ConversationID: "c1", Turn: json.RawMessage(fmt.Sprintf(`{"w":%d,"r":%d}`, i, r))}); err != nil {
				return err
			}
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	turns, err := ss[len(ss)-1].ListTurns(ctx, "c1")
	if err != nil || len(turns) != raceWorkers*rounds {
		t.Fatalf("%d turns, %v; want %d", len(turns), err, raceWorkers*rounds)
	}
	for i, tn := range turns {
		if tn.Seq != i+1 {
			t.Fatalf("turn %d has seq %d", i, tn.Seq)
		}
	}
}

// RunBackend runs every interface's suite against a backend: Run,
// RunConversations, RunAccess, RunCells, RunNodes and RunPaging. newBackend must
// return a fresh, empty store each time it is called; RunBackend closes it.
func RunBackend(t *testing.T, newBackend func(t *testing.T) store.Backend) {
	closing := func(t *testing.T) store.Backend {
		b := newBackend(t)
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return b
	}
	t.Run("Store", func(t *testing.T) { Run(t, func(t *testing.T) store.Store { return newBackend(t) }) })
	t.Run("Conversations", func(t *testing.T) {
		RunConversations(t, func(t *testing.T) store.ConversationStore { return closing(t) })
	})
	t.Run("Access", func(t *testing.T) { RunAccess(t, func(t *testing.T) store.AccessStore { return closing(t) }) })
	t.Run("Cells", func(t *testing.T) { RunCells(t, func(t *testing.T) store.CellStore { return closing(t) }) })
	t.Run("Nodes", func(t *testing.T) { RunNodes(t, func(t *testing.T) store.NodeStore { return closing(t) }) })
	t.Run("Paging", func(t *testing.T) { RunPaging(t, closing) })
}
