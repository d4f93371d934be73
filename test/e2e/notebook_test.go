package e2e

import (
	"encoding/base64"
	binenc "encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/sse"
)

// nbValidate checks a notebook with Jupyter's own nbformat (Debian's
// python3-nbformat, installed by make setup) and returns it decoded.
func nbValidate(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	p := filepath.Join(t.TempDir(), "n.ipynb")
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("/usr/bin/python3", "-c",
		`import nbformat, sys; nbformat.validate(nbformat.read(sys.argv[1], as_version=4))`, p).CombinedOutput()
	if err != nil {
		t.Fatalf("nbformat rejects the exported notebook (python3-nbformat: make setup): %v\n%s", err, out)
	}
	var nb map[string]any
	if err := json.Unmarshal(raw, &nb); err != nil {
		t.Fatal(err)
	}
	return nb
}

// TestNotebook: every cell a sandbox runs is in its history with its
// outputs, also after the sandbox is suspended and resumed; the history
// exports as a valid notebook; an uploaded notebook runs cell by cell and
// stops at the first error; a conversation's notebook has its cells; bad
// notebooks get clear errors and change nothing.
func TestNotebook(t *testing.T) {
	needRoot(t)
	d := shared
	sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "nb-" + strings.ToLower(t.Name()[:4])})
	noError(t, runCode(t, d, sb.ID, py("print('hello')\nsales = [120, 95]")))
	noError(t, runCode(t, d, sb.ID, py("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.title('2024-01')\nplt.show()\nsum(sales)")))

	cells := func(ref string) []api.Cell {
		t.Helper()
		st, _, raw := call(t, d, "GET", "/v1/sandboxes/"+ref+"/cells", "", nil)
		if st != 200 {
			t.Fatalf("cells: %d %s", st, raw)
		}
		var l api.CellList
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatal(err)
		}
		return l.Cells
	}
	got := cells(sb.Name) // by name too
	if len(got) < 2 || got[0].Seq != 1 || got[1].Seq != 2 || got[0].Source != api.CellUser || got[0].Sandbox != sb.ID ||
		got[0].Execution == nil || strings.Join(got[0].Execution.Logs.Stdout, "") != "hello\n" {
		t.Fatalf("cells after two runs: %+v", got)
	}
	var png, main string
	for _, r := range got[1].Execution.Results {
		if p, ok := r["png"].(string); ok {
			png = p
		}
		if r["is_main_result"] == true {
			main, _ = r["text"].(string)
		}
	}
	if png == "" || main != "215" {
		t.Fatalf("the chart cell's kept results: %+v", got[1].Execution.Results)
	}

	// Charts are cropped to what they draw ('tight'), as notebooks do: a
	// tick label far beyond the axes is in the picture, which is then not
	// the figure's nominal size.
	ex := runCode(t, d, sb.ID, py("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2]); ax.set_yticks([1, 2])\n"+
		"ax.set_yticklabels(['2024-01 a tick label much longer than the margin', '2024-02'])\nplt.show()"))
	var fig map[string]any
	for _, r := range ex.Results {
		if _, ok := r["png"]; ok {
			fig = r
		}
	}
	if fig == nil {
		t.Fatalf("no chart: %+v", ex.Results)
	}
	pngBytes, _ := base64.StdEncoding.DecodeString(fig["png"].(string))
	if len(pngBytes) < 24 || string(pngBytes[1:4]) != "PNG" {
		t.Fatalf("not a PNG: %q", pngBytes[:min(len(pngBytes), 8)])
	}
	w, h := binenc.BigEndian.Uint32(pngBytes[16:20]), binenc.BigEndian.Uint32(pngBytes[20:24])
	if nominal := fmt.Sprint(fig["text"]); strings.Contains(nominal, fmt.Sprintf("size %dx%d", w, h)) {
		t.Errorf("the chart is exactly its figure's size (%dx%d, %s): not cropped to what it draws", w, h, nominal)
	}

	st, _, raw := call(t, d, "GET", "/v1/sandboxes/"+sb.ID+"/notebook", "", nil)
	if st != 200 {
		t.Fatalf("notebook: %d %s", st, raw)
	}
	nb := nbValidate(t, raw)
	text, _ := json.Marshal(nb)
	for _, want := range []string{`"image/png":"` + png[:40], `"text":"hello\n"`, `"text/plain":"215"`, "sales = [120, 95]"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("exported notebook lacks %s", want)
		}
	}

	// The notebook runs again, in another sandbox, cell by cell.
	other := newSandbox(t, d, api.CreateSandboxRequest{})
	st, _, raw = call(t, d, "POST", "/v1/sandboxes/"+other.ID+"/notebook", string(raw), map[string]string{"Content-Type": "application/x-ipynb+json"})
	var run api.NotebookRun
	if st != 200 || json.Unmarshal(raw, &run) != nil || run.Ran != 3 || run.Total != 3 || run.Stopped || len(run.Cells) != 3 ||
		run.Cells[1].Execution == nil || run.Cells[1].ID == "" {
		t.Fatalf("run the exported notebook: %d %s", st, raw)
	}
	if ex := runCode(t, d, other.ID, py("sales[0]")); len(ex.Results) != 1 || ex.Results[0]["text"] != "120" {
		t.Fatalf("the imported notebook's variables: %+v", ex)
	}

	// A failing cell stops the run; streamed, a cell event per cell.
	failing := `{"nbformat":4,"nbformat_minor":5,"metadata":{},"cells":[
		{"cell_type":"code","source":["a = 6\n","print(a * 7)"],"metadata":{},"outputs":[],"execution_count":null},
		{"cell_type":"code","source":"1/0","metadata":{},"outputs":[],"execution_count":null},
		{"cell_type":"code","source":"a = 0","metadata":{},"outputs":[],"execution_count":null}]}`
	req, _ := http.NewRequest("POST", "http://"+d.addr+"/v1/sandboxes/"+other.ID+"/notebook", strings.NewReader(failing))
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	var done api.NotebookRun
	evs, err := sse.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the notebook's event stream: %v", err)
	}
	for _, ev := range evs {
		events = append(events, ev.Name)
		if ev.Name == api.EventDone {
			json.Unmarshal(ev.Data, &done)
		}
	}
	if strings.Join(events, ",") != "cell,cell,done" || done.Ran != 2 || done.Total != 3 || !done.Stopped {
		t.Fatalf("streamed run of a failing notebook: events %v, done %+v", events, done)
	}
	if ex := runCode(t, d, other.ID, py("a")); len(ex.Results) != 1 || ex.Results[0]["text"] != "6" {
		t.Fatalf("a cell after the failing one ran: %+v", ex)
	}

	// Bad notebooks: a clear 4xx, nothing run.
	before := len(cells(other.ID))
	for body, want := range map[string]string{
		`{"cells":[]}`:                   "no nbformat",
		`{"nbformat":3,"worksheets":[]}`: "nbformat 3",
		`not json`:                       "not a Jupyter notebook",
		`{"nbformat":4,"cells":[{"cell_type":"code","source":1}]}`: "cell 1",
	} {
		st, e, _ := call(t, d, "POST", "/v1/sandboxes/"+other.ID+"/notebook", body, nil)
		if st != 400 || !strings.Contains(e.Message, want) {
			t.Errorf("notebook %s: %d %+v, want 400 with %q", body, st, e, want)
		}
	}
	if n := len(cells(other.ID)); n != before {
		t.Errorf("bad notebooks ran cells: %d → %d", before, n)
	}
	if st, _, _ := call(t, d, "GET", "/v1/sandboxes/sbx_doesnotexist0000/cells", "", nil); st != 404 {
		t.Errorf("cells of an unknown sandbox: %d, want 404", st)
	}

	// A suspended and resumed session keeps its history.
	if st, _, raw := call(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/suspend", "", nil); st != 200 {
		t.Fatalf("suspend: %d %s", st, raw)
	}
	if got := cells(sb.ID); len(got) != 3 {
		t.Fatalf("cells of the suspended sandbox: %d, want 3", len(got))
	}
	noError(t, runCode(t, d, sb.ID, py("x_after = sum(sales)")))
	if got := cells(sb.ID); len(got) != 4 || got[3].Code != "x_after = sum(sales)" {
		t.Fatalf("cells after resume: %+v", got)
	}

	// A conversation's cells and notebook.
	st, _, raw = call(t, d, "POST", "/v1/conversations", `{}`, nil)
	var conv api.Conversation
	if st != 201 && st != 200 || json.Unmarshal(raw, &conv) != nil {
		t.Fatalf("create conversation: %d %s", st, raw)
	}
	t.Cleanup(func() { call(t, d, "DELETE", "/v1/conversations/"+conv.ID, "", nil) })
	noError(t, runCode(t, d, conv.Sandbox, py("print('from the Code tab')")))
	st, _, raw = call(t, d, "GET", "/v1/conversations/"+conv.ID, "", nil)
	if st != 200 || json.Unmarshal(raw, &conv) != nil || len(conv.Cells) != 1 || conv.Cells[0].Code != "print('from the Code tab')" {
		t.Fatalf("conversation cells: %d %s", st, raw)
	}
	st, _, raw = call(t, d, "GET", "/v1/conversations/"+conv.ID+"/notebook", "", nil)
	if st != 200 || !strings.Contains(string(raw), "from the Code tab") {
		t.Fatalf("conversation notebook: %d %s", st, raw)
	}
	nbValidate(t, raw)
}
