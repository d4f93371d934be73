package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/sse"
)

// runCode posts a cell and decodes the execution (raw HTTP: the contract's
// JSON shape is what is under test).
func runCode(t *testing.T, d *daemon, sb string, req api.RunCodeRequest) *api.Execution {
	t.Helper()
	status, raw := postJSON(t, d, "/v1/sandboxes/"+sb+"/code", req)
	if status != 200 {
		t.Fatalf("run_code %q: %d %s", req.Code, status, raw)
	}
	var ex api.Execution
	if err := json.Unmarshal(raw, &ex); err != nil {
		t.Fatalf("decode execution: %v\n%s", err, raw)
	}
	return &ex
}

func postJSON(t *testing.T, d *daemon, path string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post("http://"+d.addr+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

func py(code string) api.RunCodeRequest { return api.RunCodeRequest{Code: code} }

func noError(t *testing.T, ex *api.Execution) {
	t.Helper()
	if ex.Error != nil {
		t.Fatalf("cell failed: %+v", ex.Error)
	}
}

func TestCodeStateAndContract(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	ex := runCode(t, shared, sb.ID, py("sales = [120, 95]"))
	noError(t, ex)
	ex = runCode(t, shared, sb.ID, py("sum(sales)"))
	raw, _ := json.Marshal(ex.Results)
	if string(raw) != `[{"is_main_result":true,"text":"215"}]` || ex.ExecutionCount != 2 || ex.Error != nil {
		t.Fatalf("sum(sales): results %s count %d error %+v", raw, ex.ExecutionCount, ex.Error)
	}
	// The raw JSON has "error": null and empty lists, not missing keys.
	_, body := postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/code", py("1"))
	for _, want := range []string{`"error": null`, `"stdout": []`, `"stderr": []`, `"execution_count": 3`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("execution JSON lacks %s:\n%s", want, body)
		}
	}

	t.Run("dataframe", func(t *testing.T) {
		ex := runCode(t, shared, sb.ID, py("import pandas as pd\npd.DataFrame({'region': ['N', 'S'], 'profit': [1.5, 2.5]})"))
		noError(t, ex)
		if len(ex.Results) != 1 || ex.Results[0]["is_main_result"] != true || ex.Results[0]["html"] == nil ||
			!strings.Contains(fmt.Sprint(ex.Results[0]["text"]), "profit") {
			t.Fatalf("DataFrame result: %+v", ex.Results)
		}
	})
	t.Run("display several", func(t *testing.T) {
		ex := runCode(t, shared, sb.ID, py("from IPython.display import display, Markdown\ndisplay('first')\ndisplay(Markdown('**second**'))\ndisplay(3)"))
		noError(t, ex)
		if len(ex.Results) != 3 || ex.Results[0]["text"] != "'first'" || ex.Results[1]["markdown"] != "**second**" || ex.Results[2]["text"] != "3" {
			t.Fatalf("display results: %+v", ex.Results)
		}
	})
	t.Run("matplotlib png", func(t *testing.T) {
		ex := runCode(t, shared, sb.ID, py("import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(4, 3), dpi=100)\nplt.plot([1, 3, 2])"))
		noError(t, ex)
		var pngs []string
		for _, r := range ex.Results {
			if p, ok := r["png"].(string); ok {
				pngs = append(pngs, p)
			}
		}
		if len(pngs) != 1 {
			t.Fatalf("want one png, got results %v", ex.Results)
		}
		b, err := base64.StdEncoding.DecodeString(pngs[0])
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("png does not decode: %v", err)
		}
		// Cropped to what it draws ('tight'), as notebooks do: about the
		// figure's 400x300, less its empty margins.
		if sz := img.Bounds().Size(); sz.X < 300 || sz.X > 420 || sz.Y < 220 || sz.Y > 320 {
			t.Fatalf("figure 4x3 in at 100 dpi is %v, want about 400x300", sz)
		}
		// Figures are closed after being returned: the next cell has none.
		if ex := runCode(t, shared, sb.ID, py("x = 1")); len(ex.Results) != 0 {
			t.Fatalf("figure returned again: %+v", ex.Results)
		}
	})
	t.Run("logs in order", func(t *testing.T) {
		ex := runCode(t, shared, sb.ID, py("import sys\nprint('out1', flush=True)\nprint('err1', file=sys.stderr, flush=True)\nprint('out2', flush=True)"))
		noError(t, ex)
		if strings.Join(ex.Logs.Stdout, "") != "out1\nout2\n" || strings.Join(ex.Logs.Stderr, "") != "err1\n" {
			t.Fatalf("logs: %+v", ex.Logs)
		}
	})
	t.Run("ValueError", func(t *testing.T) {
		ex := runCode(t, shared, sb.ID, py("def check(v):\n    raise ValueError('bad value %d' % v)\ncheck(7)"))
		if ex.Error == nil || ex.Error.Name != "ValueError" || ex.Error.Value != "bad value 7" {
			t.Fatalf("error: %+v", ex.Error)
		}
		tb := strings.Join(ex.Error.Traceback, "\n")
		if !strings.Contains(tb, "check(7)") || !strings.Contains(tb, "raise ValueError") || strings.Contains(tb, "\x1b[") {
			t.Fatalf("traceback does not show the user's lines (or has colors):\n%s", tb)
		}
	})
	t.Run("syntax error runs nothing", func(t *testing.T) {
		ex := runCode(t, shared, sb.ID, py("open('/workspace/ran', 'w').write('x')\nx = ("))
		if ex.Error == nil || ex.Error.Name != "SyntaxError" {
			t.Fatalf("error: %+v", ex.Error)
		}
		if res := run(t, shared, sb.ID, "ls", "/workspace/ran"); res.ExitCode == 0 {
			t.Fatal("a cell with a syntax error ran its first line")
		}
	})
	t.Run("empty code", func(t *testing.T) {
		ex := runCode(t, shared, sb.ID, py(""))
		if ex.Error != nil || len(ex.Results) != 0 || len(ex.Logs.Stdout) != 0 {
			t.Fatalf("empty cell: %+v", ex)
		}
	})
	t.Run("env for one cell", func(t *testing.T) {
		ex := runCode(t, shared, sb.ID, api.RunCodeRequest{Code: "import os; os.environ.get('ONLY_HERE')", Env: map[string]string{"ONLY_HERE": "yes"}})
		if len(ex.Results) != 1 || ex.Results[0]["text"] != "'yes'" {
			t.Fatalf("cell env: %+v", ex.Results)
		}
		ex = runCode(t, shared, sb.ID, py("import os; os.environ.get('ONLY_HERE')"))
		if len(ex.Results) != 0 {
			t.Fatalf("env leaked into the next cell: %+v", ex.Results)
		}
	})
}

func TestCodeTimeoutKeepsVariables(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, sb.ID, py("kept = 41")))
	ms := int64(1000)
	ex := runCode(t, shared, sb.ID, api.RunCodeRequest{Code: "while True: pass", TimeoutMS: &ms})
	if ex.Error == nil || ex.Error.Name != "TimeoutError" {
		t.Fatalf("infinite loop with timeout_ms 1000: %+v", ex.Error)
	}
	t.Logf("timed out cell returned after %d ms", ex.DurationMS)
	if ex := runCode(t, shared, sb.ID, py("kept + 1")); len(ex.Results) != 1 || ex.Results[0]["text"] != "42" {
		t.Fatalf("variable lost after timeout: %+v", ex)
	}
}

func TestCodeKernelDeath(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{MemoryMB: i64(256)})
	noError(t, runCode(t, shared, sb.ID, py("gone = 1")))
	ex := runCode(t, shared, sb.ID, py("import os; os._exit(1)"))
	if ex.Error == nil || ex.Error.Name != "KernelDied" {
		t.Fatalf("os._exit: %+v", ex.Error)
	}
	ex = runCode(t, shared, sb.ID, py("'gone' in globals()"))
	if ex.Error != nil || len(ex.Results) != 1 || ex.Results[0]["text"] != "False" || ex.ExecutionCount != 1 {
		t.Fatalf("after death, a fresh kernel: %+v", ex)
	}
	ex = runCode(t, shared, sb.ID, py("x = bytearray(1024 * 1024 * 1024)\nx[::4096] = b'x' * len(x[::4096])"))
	if ex.Error == nil || ex.Error.Name != "KernelDied" || !strings.Contains(ex.Error.Value, "out of memory") {
		t.Fatalf("1 GB in a 256 MB sandbox: %+v", ex.Error)
	}
	if res := run(t, shared, sb.ID, "echo", "still"); res.Stdout != "still\n" {
		t.Fatalf("sandbox after kernel OOM: %+v", res)
	}
	if ex := runCode(t, shared, sb.ID, py("1 + 1")); ex.Error != nil || ex.Results[0]["text"] != "2" {
		t.Fatalf("code after OOM: %+v", ex)
	}
}

func TestCodeContexts(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	sh(t, shared, sb.ID, "mkdir -p /workspace/proj && echo shared > /workspace/proj/data.txt")
	status, raw := postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/contexts", api.CreateContextRequest{Language: "python", Cwd: "/workspace/proj", Env: map[string]string{"CTX_ENV": "ctx-value"}})
	if status != 201 {
		t.Fatalf("create context: %d %s", status, raw)
	}
	var c api.Context
	json.Unmarshal(raw, &c)
	if c.ID == "" || c.Cwd != "/workspace/proj" || c.Default {
		t.Fatalf("context: %+v", c)
	}
	noError(t, runCode(t, shared, sb.ID, py("v = 'default'")))
	noError(t, runCode(t, shared, sb.ID, api.RunCodeRequest{Code: "v = 'other'", Context: c.ID}))
	if ex := runCode(t, shared, sb.ID, py("v")); ex.Results[0]["text"] != "'default'" {
		t.Fatalf("default context: %+v", ex.Results)
	}
	ex := runCode(t, shared, sb.ID, api.RunCodeRequest{Code: "import os\nprint(v, os.getcwd(), os.environ['CTX_ENV'], open('data.txt').read().strip())", Context: c.ID})
	if strings.Join(ex.Logs.Stdout, "") != "other /workspace/proj ctx-value shared\n" {
		t.Fatalf("second context: %+v", ex)
	}
	resp, err := http.Get("http://" + shared.addr + "/v1/sandboxes/" + sb.ID + "/contexts")
	if err != nil {
		t.Fatal(err)
	}
	var list api.ContextList
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Contexts) != 2 {
		t.Fatalf("contexts: %+v", list)
	}
	// Restart empties the variables; delete removes the context.
	if status, raw := postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/contexts/"+c.ID+"/restart", nil); status != 200 {
		t.Fatalf("restart: %d %s", status, raw)
	}
	if ex := runCode(t, shared, sb.ID, api.RunCodeRequest{Code: "'v' in globals()", Context: c.ID}); ex.Results[0]["text"] != "False" {
		t.Fatalf("after restart: %+v", ex)
	}
	// A missing cwd is made (mkdir -p, as the sandbox user); one the user
	// may not make is refused the same way as one it may not enter.
	status, raw = postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/contexts", api.CreateContextRequest{Cwd: "/workspace/new/deep"})
	var made api.Context
	if status != 201 || json.Unmarshal(raw, &made) != nil || made.Cwd != "/workspace/new/deep" {
		t.Fatalf("context in a missing dir: %d %s", status, raw)
	}
	if ex := runCode(t, shared, sb.ID, api.RunCodeRequest{Code: "import os; print(os.getcwd(), os.stat('.').st_uid)", Context: made.ID}); strings.Join(ex.Logs.Stdout, "") != "/workspace/new/deep 1000\n" {
		t.Fatalf("the made cwd: %+v", ex)
	}
	for _, bad := range []string{"/root/made", "/etc/made", "/proc/1/root/made"} {
		status, raw = postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/contexts", api.CreateContextRequest{Cwd: bad})
		if status != 400 || !strings.Contains(string(raw), "not a directory the sandbox user can enter") && !strings.Contains(string(raw), "outside the sandbox") {
			t.Errorf("context in %s: %d %s, want 400", bad, status, raw)
		}
	}
	if r := sh(t, shared, sb.ID, "ls -d /root/made /etc/made 2>&1; true"); strings.Contains(r.Stdout, "made\n") && !strings.Contains(r.Stdout, "No such file") {
		t.Errorf("a refused cwd was made: %q", r.Stdout)
	}
	req, _ := http.NewRequest("DELETE", "http://"+shared.addr+"/v1/sandboxes/"+sb.ID+"/contexts/"+c.ID, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 204 {
		t.Fatalf("delete context: %v %v", resp, err)
	}
	status, raw = postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/code", api.RunCodeRequest{Code: "1", Context: c.ID})
	if status != 404 || !strings.Contains(string(raw), c.ID) {
		t.Fatalf("deleted context: %d %s", status, raw)
	}
}

func TestCodeBadInput(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	status, raw := postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/code", api.RunCodeRequest{Code: "1", Context: "ctx_nope"})
	if status != 404 || !strings.Contains(string(raw), "ctx_nope") {
		t.Fatalf("unknown context: %d %s", status, raw)
	}
	status, raw = postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/code", api.RunCodeRequest{Code: "1", Language: "cobol"})
	if status != 400 || !strings.Contains(string(raw), "python3") || !strings.Contains(string(raw), "cobol") {
		t.Fatalf("unknown language: %d %s", status, raw)
	}
	big := strings.Repeat("x = 1\n", 10<<20/6)
	status, raw = postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/code", api.RunCodeRequest{Code: big})
	if status != 413 {
		t.Fatalf("10 MB cell: %d %.200s", status, raw)
	}
	status, raw = postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/code", map[string]any{"code": "1", "timeout_ms": 0})
	if status != 400 || !strings.Contains(string(raw), "timeout_ms") {
		t.Fatalf("timeout_ms 0: %d %s", status, raw)
	}
	// A NUL byte in a cell: refused at once (the kernel would never answer).
	status, raw = postJSON(t, shared, "/v1/sandboxes/"+sb.ID+"/code", map[string]any{"code": "\x00"})
	if status != 400 || !strings.Contains(string(raw), "NUL") {
		t.Fatalf("a cell with a NUL byte: %d %s", status, raw)
	}
	// The kernel never saw the refused cells: the next cell is the first.
	if ex := runCode(t, shared, sb.ID, py("1")); ex.ExecutionCount != 1 {
		t.Fatalf("refused cells reached the kernel: count %d", ex.ExecutionCount)
	}
	if _, err := shared.c.Exec(ctxT(t), "sbx_nope", api.ExecRequest{Cmd: "true"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatal(err)
	}
}

// TestCodeArrivalOrder: 20 calls to one context complete in the order they
// arrived, while a first cell holds the kernel.
func TestCodeArrivalOrder(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	noError(t, runCode(t, shared, sb.ID, py("import time\norder = []")))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); runCode(t, shared, sb.ID, py("time.sleep(4)")) }()
	time.Sleep(300 * time.Millisecond)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); runCode(t, shared, sb.ID, py(fmt.Sprintf("order.append(%d)", i))) }(i)
		// Arrival order is the submission order: spaced well beyond what
		// a loaded host (make test runs packages in parallel) takes to
		// deliver a request.
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	ex := runCode(t, shared, sb.ID, py("order"))
	want := make([]string, 20)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	if ex.Results[0]["text"] != "["+strings.Join(want, ", ")+"]" {
		t.Fatalf("order of completion: %v", ex.Results[0]["text"])
	}
}

// TestCodeSandboxesRunInParallel: cells in 4 sandboxes overlap in time (each
// records when it ran; all intervals share a moment).
func TestCodeSandboxesRunInParallel(t *testing.T) {
	needRoot(t)
	var ids []string
	for i := 0; i < 4; i++ {
		sb := newSandbox(t, shared, api.CreateSandboxRequest{})
		noError(t, runCode(t, shared, sb.ID, py("import time")))
		ids = append(ids, sb.ID)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		starts []float64
		ends   []float64
	)
	for _, id := range ids {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			ex := runCode(t, shared, id, py("s = time.time(); time.sleep(2); (s, time.time())"))
			var s, e float64
			fmt.Sscanf(fmt.Sprint(ex.Results[0]["text"]), "(%g, %g)", &s, &e)
			mu.Lock()
			starts, ends = append(starts, s), append(ends, e)
			mu.Unlock()
		}(id)
	}
	wg.Wait()
	latestStart, earliestEnd := starts[0], ends[0]
	for i := range starts {
		latestStart, earliestEnd = max(latestStart, starts[i]), min(earliestEnd, ends[i])
	}
	if len(starts) != 4 || latestStart >= earliestEnd {
		t.Fatalf("cells in 4 sandboxes did not overlap: starts %v ends %v", starts, ends)
	}
}

// TestCodeStreaming: the loop's prints arrive as three stdout events before
// done; the cell waits for a file the test writes only after the first event
// arrived, which proves the events are delivered while the cell runs.
func TestCodeStreaming(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	code := "import time, os\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.3)\n    while i == 0 and not os.path.exists('/workspace/go-on'):\n        time.sleep(0.05)"
	b, _ := json.Marshal(py(code))
	req, _ := http.NewRequestWithContext(ctxT(t), "POST", "http://"+shared.addr+"/v1/sandboxes/"+sb.ID+"/code", bytes.NewReader(b))
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	var events []string
	var stdout []string
	wrote := false
	stream := sse.NewReader(resp.Body)
	for {
		ev, err := stream.Next()
		if err != nil {
			break // the end of the stream; what it held is checked below
		}
		events = append(events, ev.Name)
		if ev.Name == "stdout" {
			var c api.OutputChunk
			json.Unmarshal(ev.Data, &c)
			stdout = append(stdout, c.Data)
			if !wrote {
				wrote = true
				if _, err := shared.c.WriteFile(context.Background(), sb.ID, "/workspace/go-on", strings.NewReader("1"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if strings.Join(events, ",") != "stdout,stdout,stdout,done" || strings.Join(stdout, "") != "0\n1\n2\n" {
		t.Fatalf("events %v stdout %q", events, stdout)
	}
}

// TestCodeSecondLanguage runs R on the host-derived image, which brings the
// host's R kernel (the default python image has Python only).
func TestCodeSecondLanguage(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{Image: "host"})
	ex := runCode(t, shared, sb.ID, api.RunCodeRequest{Code: "total <- sum(c(120, 95))", Language: "r"})
	noError(t, ex)
	ex = runCode(t, shared, sb.ID, api.RunCodeRequest{Code: "total * 2", Language: "r"})
	noError(t, ex)
	if len(ex.Results) != 1 || !strings.Contains(fmt.Sprint(ex.Results[0]["text"]), "430") || ex.ExecutionCount != 2 {
		t.Fatalf("R kept no variable: %+v", ex)
	}
}
