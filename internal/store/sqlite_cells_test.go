package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// TestCells: a sandbox's cells get the next seq in order, across batches;
// each tenant sees only its own; the oldest go beyond MaxCellsPerSandbox;
// a bad execution writes nothing of its batch.
func TestCells(t *testing.T) {
	ctx := context.Background()
	s := openClosing(t, filepath.Join(t.TempDir(), "f.db"))
	cell := func(id, sbx, ten string) store.Cell {
		return store.Cell{ID: id, Tenant: ten, SandboxID: sbx, Source: "user", Language: "python",
			Code: "x = " + id, Execution: json.RawMessage(`{"execution_count":1}`)}
	}
	if err := s.AppendCells(ctx, []store.Cell{cell("c1", "sbx_a", "acme"), cell("c2", "sbx_b", "beta"), cell("c3", "sbx_a", "acme")}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendCells(ctx, []store.Cell{cell("c4", "sbx_a", "acme")}); err != nil {
		t.Fatal(err)
	}
	acme := tenant.With(ctx, tenant.Principal{Tenant: "acme"})
	got, err := s.ListCells(acme, "sbx_a")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, c := range got {
		ids = append(ids, c.ID)
		if c.Seq != i+1 || c.Tenant != "acme" || c.Code != "x = "+c.ID || string(c.Execution) != `{"execution_count":1}` || c.CreatedAt.IsZero() {
			t.Errorf("cell %d: %+v", i, c)
		}
	}
	if fmt.Sprint(ids) != "[c1 c3 c4]" {
		t.Fatalf("cells of sbx_a: %v, want [c1 c3 c4]", ids)
	}
	if got, _ := s.ListCells(acme, "sbx_b"); len(got) != 0 {
		t.Fatalf("acme sees beta's cells: %v", got)
	}
	if got, _ := s.ListCells(tenant.Unscoped(ctx), "sbx_b"); len(got) != 1 {
		t.Fatalf("unscoped: %d cells of sbx_b, want 1", len(got))
	}
	bad := cell("c5", "sbx_a", "acme")
	bad.Execution = json.RawMessage(`{`)
	if err := s.AppendCells(ctx, []store.Cell{cell("c6", "sbx_a", "acme"), bad}); err == nil {
		t.Fatal("a cell whose execution is not JSON was stored")
	}
	if got, _ := s.ListCells(acme, "sbx_a"); len(got) != 3 {
		t.Fatalf("a failed batch left %d cells, want 3", len(got))
	}
	var many []store.Cell
	for i := range store.MaxCellsPerSandbox + 5 {
		many = append(many, cell(fmt.Sprintf("m%d", i), "sbx_c", "acme"))
	}
	if err := s.AppendCells(ctx, many); err != nil {
		t.Fatal(err)
	}
	got, _ = s.ListCells(acme, "sbx_c")
	if len(got) != store.MaxCellsPerSandbox || got[0].ID != "m5" || got[len(got)-1].Seq != store.MaxCellsPerSandbox+5 {
		t.Fatalf("after %d cells: %d kept, first %s, last seq %d", store.MaxCellsPerSandbox+5, len(got), got[0].ID, got[len(got)-1].Seq)
	}
}
