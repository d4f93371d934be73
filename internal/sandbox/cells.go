package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/batch"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/textcut"
)

// A sandbox's cell history: every cell it runs is recorded (in batches,
// off the call's path) with its outputs, so that a notebook survives a
// reload and can be exported. What a cell printed or drew beyond the bounds
// below is not kept (the run's own answer had all of it).
const (
	// maxCellLogBytes bounds a cell's kept stdout and stderr, each.
	maxCellLogBytes = 256 << 10
	// maxCellBytes bounds a kept cell's execution as JSON: beyond it, its
	// largest result values are dropped, largest first.
	maxCellBytes = 4 << 20
)

// SetCellStore keeps the cells sandboxes run in cs. Call before Start.
func (m *Manager) SetCellStore(cs store.CellStore) {
	m.cellStore = cs
	m.cells = batch.New(batch.Config[store.Cell]{
		Write:   cs.AppendCells,
		OnError: func(n int, err error) { m.log.Warn("write cell history", "cells", n, "err", err) },
	})
}

// recordCell queues a cell that ran in l for its history.
func (m *Manager) recordCell(l *live, req *api.RunCodeRequest, opts CodeOptions, exec *api.Execution, start time.Time) {
	if m.cells == nil || opts.Unrecorded {
		return
	}
	source := opts.Source
	if source == "" {
		source = api.CellUser
	}
	lang := req.Language
	if lang == "" {
		lang = "python"
	}
	b, err := keptExecution(exec)
	if err != nil {
		m.log.Warn("cell history", "sandbox", l.id, "err", err)
		return
	}
	c := store.Cell{ID: newID("cell_"), Tenant: l.tenant, SandboxID: l.id, Source: source,
		Language: lang, Code: req.Code, Execution: b, CreatedAt: start.UTC()}
	m.cells.Add(c)
	if opts.OnRecorded != nil {
		opts.OnRecorded(api.Cell{ID: c.ID, Sandbox: c.SandboxID, Source: source, Code: c.Code, Language: lang,
			ContextID: exec.ContextID, Execution: exec, CreatedAt: c.CreatedAt})
	}
}

// keptExecution is what a cell's history keeps of exec, as JSON: all of it
// within the bounds, else its logs cut and its largest result values
// dropped (a result then says which under "omitted").
func keptExecution(exec *api.Execution) ([]byte, error) {
	e := *exec
	e.Logs.Stdout = cutLog(e.Logs.Stdout)
	e.Logs.Stderr = cutLog(e.Logs.Stderr)
	b, err := json.Marshal(&e)
	if err != nil || len(b) <= maxCellBytes {
		return b, err
	}
	results := make([]map[string]any, len(e.Results))
	for i, r := range e.Results {
		results[i] = make(map[string]any, len(r))
		for k, v := range r {
			results[i][k] = v
		}
	}
	e.Results = results
	for len(b) > maxCellBytes {
		bi, bk, bn := -1, "", 0
		for i, r := range results {
			for k, v := range r {
				if s, ok := v.(string); ok && k != "text" && len(s) > bn {
					bi, bk, bn = i, k, len(s)
				}
			}
		}
		if bi < 0 {
			break
		}
		delete(results[bi], bk)
		omitted, _ := results[bi]["omitted"].([]string)
		results[bi]["omitted"] = append(omitted, fmt.Sprintf("%s (%d bytes)", bk, bn))
		if b, err = json.Marshal(&e); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// cutLog keeps the first maxCellLogBytes of a log and says how much more
// there was.
func cutLog(chunks []string) []string {
	total := 0
	for i, c := range chunks {
		if total+len(c) > maxCellLogBytes {
			rest := 0
			for _, d := range chunks[i:] {
				rest += len(d)
			}
			// Cut between characters: a split one would be kept as U+FFFD.
			kept := textcut.Prefix(c, maxCellLogBytes-total)
			out := append([]string{}, chunks[:i]...)
			return append(out, kept, fmt.Sprintf("\n[… %d more bytes not kept in the cell history]\n", rest-len(kept)))
		}
		total += len(c)
	}
	return chunks
}

// Cells returns the cells a sandbox ran (any state, by id or a live
// sandbox's name), oldest first.
func (m *Manager) Cells(ctx context.Context, ref string) ([]api.Cell, error) {
	sb, err := m.store.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	out := []api.Cell{}
	if m.cellStore == nil {
		return out, nil
	}
	m.cells.Flush() // what just ran is in the answer
	cells, err := m.cellStore.ListCells(ctx, sb.ID)
	if err != nil {
		return nil, err
	}
	for _, c := range cells {
		var e api.Execution
		if err := json.Unmarshal(c.Execution, &e); err != nil {
			return nil, fmt.Errorf("cell %s of %s: %w", c.ID, sb.ID, err)
		}
		normalize(&e)
		out = append(out, api.Cell{ID: c.ID, Sandbox: c.SandboxID, Seq: c.Seq, Source: c.Source, Code: c.Code,
			Language: c.Language, ContextID: e.ContextID, Execution: &e, CreatedAt: c.CreatedAt})
	}
	return out, nil
}
