package sandbox

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
)

// TestKeptExecution: a cell's history keeps small executions whole, cuts a
// huge log with a note of how much more there was, and drops the largest
// result values first (never the text), naming them.
func TestKeptExecution(t *testing.T) {
	small := &api.Execution{Logs: api.Logs{Stdout: []string{"hi\n"}}, Results: []map[string]any{{"text": "2", "png": "iVBOR"}}, ExecutionCount: 1}
	b, err := keptExecution(small)
	if err != nil {
		t.Fatal(err)
	}
	var got api.Execution
	if err := json.Unmarshal(b, &got); err != nil || got.Results[0]["png"] != "iVBOR" || got.Logs.Stdout[0] != "hi\n" {
		t.Fatalf("a small execution changed: %s", b)
	}
	big := &api.Execution{
		Logs: api.Logs{Stdout: []string{strings.Repeat("a", maxCellLogBytes-10), strings.Repeat("b", 100)}},
		Results: []map[string]any{
			{"text": "<Figure>", "png": strings.Repeat("P", 3<<20)},
			{"text": strings.Repeat("t", 100), "html": strings.Repeat("h", 2<<20)},
		},
	}
	b, err = keptExecution(big)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxCellBytes {
		t.Fatalf("kept %d bytes, over %d", len(b), maxCellBytes)
	}
	got = api.Execution{}
	json.Unmarshal(b, &got)
	out := strings.Join(got.Logs.Stdout, "")
	if !strings.HasPrefix(out, strings.Repeat("a", maxCellLogBytes-10)+"bbbbbbbbbb") || !strings.Contains(out, "90 more bytes not kept") {
		t.Errorf("cut log ends %q", out[len(out)-80:])
	}
	if _, ok := got.Results[0]["png"]; ok {
		t.Errorf("the largest value (png) was kept")
	}
	if got.Results[0]["text"] != "<Figure>" || got.Results[1]["html"] == nil {
		t.Errorf("more than the largest value was dropped: %v", got.Results)
	}
	if o, _ := got.Results[0]["omitted"].([]any); len(o) != 1 || !strings.HasPrefix(o[0].(string), "png (") {
		t.Errorf("omitted: %v", got.Results[0]["omitted"])
	}
	if small.Results[0]["omitted"] != nil || big.Results[0]["png"] == nil {
		t.Errorf("the run's own execution was changed")
	}
	// A character across the bound is not split: it goes with the rest.
	split := &api.Execution{Logs: api.Logs{Stdout: []string{strings.Repeat("a", maxCellLogBytes-1) + "é" + strings.Repeat("b", 9)}}}
	if b, err = keptExecution(split); err != nil {
		t.Fatal(err)
	}
	got = api.Execution{}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("a", maxCellLogBytes-1) + "\n[… 11 more bytes not kept"
	if out := strings.Join(got.Logs.Stdout, ""); !strings.HasPrefix(out, want) {
		t.Errorf("a log cut inside a character: %q…, want %q…", out[max(0, len(out)-60):], want[len(want)-40:])
	}
}
