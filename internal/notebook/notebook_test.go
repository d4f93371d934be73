package notebook

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// validate checks a notebook with Jupyter's own nbformat (Debian's
// python3-nbformat, which make setup installs).
func validate(t *testing.T, nb []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "n.ipynb")
	if err := os.WriteFile(p, nb, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("/usr/bin/python3", "-c", `import nbformat, sys; nbformat.validate(nbformat.read(sys.argv[1], as_version=4)); print("valid")`, p).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No module named 'nbformat'") {
			t.Fatalf("python3-nbformat is missing: run make setup")
		}
		t.Fatalf("nbformat rejects the notebook: %v\n%s\n%s", err, out, nb)
	}
}

func TestBuildValidates(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	items := []Item{
		{Markdown: "# Sales"},
		{Cell: &api.Cell{ID: "cell_1", Source: api.CellUser, Code: "print('hi')\nx = 2", CreatedAt: at, Execution: &api.Execution{
			Logs: api.Logs{Stdout: []string{"hi\n"}, Stderr: []string{"warn\n"}}, ExecutionCount: 1}}},
		{Cell: &api.Cell{ID: "cell_2", Source: api.CellModel, Code: "x + 1", CreatedAt: at, Execution: &api.Execution{
			Results: []map[string]any{
				{"png": "iVBORw0KGgo=", "text": "<Figure>"},
				{"text": "3", "html": "<b>3</b>", "is_main_result": true, "extra": map[string]any{"application/vnd.custom+json": map[string]any{"a": 1}}},
			}, ExecutionCount: 2}}},
		{Cell: &api.Cell{ID: "cell_3", Code: "1/0", Execution: &api.Execution{ExecutionCount: 3,
			Error: &api.ExecutionError{Name: "ZeroDivisionError", Value: "division by zero", Traceback: []string{"Traceback…"}}}}},
		{Cell: &api.Cell{ID: "cell_4", Code: "never ran"}},
	}
	nb, err := Build(items, "python")
	if err != nil {
		t.Fatal(err)
	}
	validate(t, nb)
	var doc struct {
		Cells []struct {
			Type    string           `json:"cell_type"`
			Count   *int             `json:"execution_count"`
			Source  string           `json:"source"`
			Outputs []map[string]any `json:"outputs"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(nb, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cells) != 5 || doc.Cells[0].Type != "markdown" || doc.Cells[1].Type != "code" {
		t.Fatalf("cells: %+v", doc.Cells)
	}
	o := doc.Cells[1].Outputs
	if len(o) != 2 || o[0]["text"] != "hi\n" || o[1]["name"] != "stderr" {
		t.Errorf("stream outputs: %v", o)
	}
	o = doc.Cells[2].Outputs
	if len(o) != 2 || o[0]["output_type"] != "display_data" || o[0]["data"].(map[string]any)["image/png"] != "iVBORw0KGgo=" ||
		o[1]["output_type"] != "execute_result" || o[1]["execution_count"] != float64(2) ||
		o[1]["data"].(map[string]any)["application/vnd.custom+json"] == nil {
		t.Errorf("result outputs: %v", o)
	}
	if o := doc.Cells[3].Outputs; len(o) != 1 || o[0]["ename"] != "ZeroDivisionError" {
		t.Errorf("error output: %v", o)
	}
	if c := doc.Cells[4]; c.Count != nil || len(c.Outputs) != 0 {
		t.Errorf("a cell that never ran: %+v", c)
	}
	// What was exported runs again: Parse reads it back.
	p, err := Parse(nb)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Cells) != 4 || p.Cells[0].Source != "print('hi')\nx = 2" || p.Language != "python" {
		t.Fatalf("parsed back: %+v", p)
	}
	r, err := Build(nil, "r")
	if err != nil {
		t.Fatal(err)
	}
	validate(t, r)
}

func TestParse(t *testing.T) {
	p, err := Parse([]byte(`{"nbformat":4,"nbformat_minor":2,"metadata":{"kernelspec":{"name":"ir","language":"R"}},
		"cells":[{"cell_type":"markdown","source":"# t"},{"cell_type":"code","source":["x <- 1\n","x + 1"]},
		{"cell_type":"code","source":"  \n"},{"cell_type":"raw","source":"y"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Cells) != 1 || p.Cells[0].Source != "x <- 1\nx + 1" || p.Language != "r" {
		t.Fatalf("parsed: %+v", p)
	}
	for in, want := range map[string]string{
		`not json`:                       "not a Jupyter notebook",
		`{"cells":[]}`:                   "no nbformat",
		`{"nbformat":3,"worksheets":[]}`: "nbformat 3 is not supported",
		`{"nbformat":5}`:                 "newer",
		`{"nbformat":4,"cells":[{"cell_type":"code","source":7}]}`:                     "cell 1: source",
		`{"nbformat":4,"metadata":{"kernelspec":{"language":"x; rm -rf"}},"cells":[]}`: "not a language",
	} {
		_, err := Parse([]byte(in))
		if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want an invalid-argument error with %q", in, err, want)
		}
	}
	var many strings.Builder
	many.WriteString(`{"nbformat":4,"cells":[`)
	for i := range MaxCells + 1 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`{"cell_type":"code","source":"1"}`)
	}
	many.WriteString(`]}`)
	if _, err := Parse([]byte(many.String())); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("a notebook of %d cells: %v", MaxCells+1, err)
	}
}

func TestConversation(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	turns := []api.ChatTurn{
		{Question: "Q1", Answer: "A1", Steps: []api.ChatStep{{Code: "df.head()", Execution: &api.Execution{ExecutionCount: 2}}}, CreatedAt: t0.Add(time.Minute)},
		{Question: "Q2", Error: "the model failed", CreatedAt: t0.Add(3 * time.Minute)},
	}
	cells := []api.Cell{
		{ID: "u1", Source: api.CellUser, Code: "a = 1", CreatedAt: t0},
		{ID: "m1", Source: api.CellModel, Code: "df.head()", CreatedAt: t0.Add(30 * time.Second)},
		{ID: "u2", Source: api.CellUser, Code: "b = 2", CreatedAt: t0.Add(2 * time.Minute)},
		{ID: "u3", Source: api.CellUser, Code: "c = 3", CreatedAt: t0.Add(4 * time.Minute)},
	}
	var got []string
	for _, it := range Conversation("Sales", turns, cells) {
		if it.Cell != nil {
			got = append(got, "code:"+it.Cell.Code)
		} else {
			got = append(got, "md:"+it.Markdown)
		}
	}
	want := "md:# Sales|code:a = 1|md:**Question:** Q1|code:df.head()|md:A1|code:b = 2|md:**Question:** Q2|md:*The turn failed:* the model failed|code:c = 3"
	if strings.Join(got, "|") != want {
		t.Fatalf("conversation notebook:\n got %s\nwant %s", strings.Join(got, "|"), want)
	}
}
