package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Python SDK (sdk/python) end to end: it is installed offline into a
// fresh virtualenv the way a user installs it (pip install ./sdk/python, no
// index, Debian's setuptools), its unit tests run, and then the programs of
// test/sdk/python, the seed article's flows written against the SDK alone,
// run against the shared daemon. Each program prints what it checks and
// exits non-zero on a failure; the test asserts on both.

// sdkPyPython is the interpreter the SDK is installed for: Debian's python3,
// which has venv, pip and setuptools without any index.
const sdkPyPython = "/usr/bin/python3"

// sdkPyInstall makes a virtualenv (with the system site packages, for
// setuptools) and pip-installs a copy of sdk/python into it offline, as a
// user would install it. The copy keeps the build's leftovers (build/,
// *.egg-info) out of the source tree. It returns the venv and the copy.
func sdkPyInstall(t *testing.T) (venv, src string) {
	t.Helper()
	if _, err := os.Stat(sdkPyPython); err != nil {
		t.Skipf("the Python SDK tests need %s (Debian's python3 with python3-venv and python3-setuptools)", sdkPyPython)
	}
	root := t.TempDir()
	venv, src = filepath.Join(root, "venv"), filepath.Join(root, "sdk")
	if err := os.CopyFS(src, os.DirFS("../../sdk/python")); err != nil {
		t.Fatalf("copy sdk/python: %v", err)
	}
	steps := [][]string{
		{sdkPyPython, "-m", "venv", "--system-site-packages", venv},
		{filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation",
			"--disable-pip-version-check", "--no-input", src},
	}
	for _, argv := range steps {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "PIP_NO_INDEX=1", "PYTHONDONTWRITEBYTECODE=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("install the Python SDK offline: %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	return venv, src
}

// sdkPyRun runs a Python program of test/sdk/python with the SDK's venv
// against daemon d, and returns its combined output. It fails the test when
// the program exits non-zero.
func sdkPyRun(t *testing.T, d *daemon, venv, program string, env ...string) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("../sdk/python", program))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(venv, "bin", "python"), script)
	// Run outside the source tree so that `import forkbox` is the installed
	// package, as for a user.
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "FORKBOX_URL=http://"+d.addr, "FORKBOX_API_KEY=",
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "PYTHONIOENCODING=utf-8")
	cmd.Env = append(cmd.Env, env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s (%.1fs):\n%s", program, time.Since(start).Seconds(), out)
	if err != nil {
		t.Fatalf("%s: %v\ndaemon log:\n%s", program, err, d.logTail())
	}
	if regexp.MustCompile(`(?m)^FAIL `).Match(out) {
		t.Fatalf("%s exited 0 but printed a FAIL line", program)
	}
	return string(out)
}

func TestSDKPython(t *testing.T) {
	needRoot(t)
	venv, src := sdkPyInstall(t)

	t.Run("unit", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(filepath.Join(venv, "bin", "python"), "-m", "unittest", "discover", "-s", "tests", "-t", ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "FORKBOX_URL=", "FORKBOX_API_KEY=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python -m unittest: %v\n%s", err, out)
		}
		if !regexp.MustCompile(`(?m)^OK`).Match(out) {
			t.Fatalf("unittest did not say OK:\n%s", out)
		}
		t.Logf("%s", out)
	})

	t.Run("interpreter_loop", func(t *testing.T) {
		t.Parallel()
		csvText, best, bestProfit, profits := sdkPySales()
		csvPath := filepath.Join(t.TempDir(), "sales.csv")
		if err := os.WriteFile(csvPath, []byte(csvText), 0o644); err != nil {
			t.Fatal(err)
		}
		model := newSDKPyModel(t)
		out := sdkPyRun(t, shared, venv, "interpreter_loop.py",
			"MODEL_URL="+model.srv.URL+"/v1", "SALES_CSV="+csvPath)
		want := fmt.Sprintf("ANSWER: The most profitable region is %s, with a profit of %.2f.", best, bestProfit)
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
		if !strings.Contains(out, "closed: terminated") {
			t.Errorf("close() did not terminate the ephemeral sandbox")
		}
		reqs := model.requests()
		if len(reqs) != 3 {
			t.Fatalf("the model got %d requests, want 3 (two tool rounds and the answer)", len(reqs))
		}
		// The first tool result is what the sandbox computed; it must match
		// the profits computed here.
		first := sdkPyToolText(reqs[1], "call_profit")
		for region, p := range profits {
			if line := fmt.Sprintf("%s %.2f", region, p); !strings.Contains(first, line) {
				t.Errorf("first tool result lacks %q:\n%s", line, first)
			}
		}
		// The second cell used the first cell's variables: the state lives
		// in the sandbox between tool calls.
		if second := sdkPyToolText(reqs[2], "call_best"); !strings.Contains(second, "best "+best) {
			t.Errorf("second tool result = %q, want best %s", second, best)
		}
	})

	t.Run("golden_snapshot", func(t *testing.T) {
		t.Parallel()
		out := sdkPyRun(t, shared, venv, "golden_snapshot.py")
		if n := strings.Count(out, "session has df, pandas and the checksum in memory"); n != 3 {
			t.Errorf("%d sessions saw the golden state, want 3", n)
		}
		sdkPyPass(t, out, "golden snapshot flow")
	})

	t.Run("named_session", func(t *testing.T) {
		t.Parallel()
		out := sdkPyRun(t, shared, venv, "named_session.py")
		for _, want := range []string{"ok   the file survived", "ok   the variables survived",
			"ok   a call on a suspended named sandbox resumes it (84)"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		sdkPyPass(t, out, "named session flow")
	})

	t.Run("checkpoint_rollback", func(t *testing.T) {
		t.Parallel()
		out := sdkPyRun(t, shared, venv, "checkpoint_rollback.py")
		if !strings.Contains(out, "rows after rollback: 1000") {
			t.Errorf("the rollback did not bring the 1000 rows back")
		}
		sdkPyPass(t, out, "checkpoint and rollback flow")
	})

	t.Run("fork_models", func(t *testing.T) {
		t.Parallel()
		out := sdkPyRun(t, shared, venv, "fork_models.py")
		r2 := regexp.MustCompile(`(?m)^(Linear|XGBoost) R²: ([0-9]\.[0-9]{4})$`).FindAllStringSubmatch(out, -1)
		if len(r2) != 2 || r2[0][1] != "Linear" || r2[1][1] != "XGBoost" {
			t.Fatalf("want a Linear and an XGBoost R² line, got %q", r2)
		}
		lin, _ := strconv.ParseFloat(r2[0][2], 64)
		gb, _ := strconv.ParseFloat(r2[1][2], 64)
		if !(0 < lin && lin < gb && gb <= 1) {
			t.Errorf("R²: linear %v, boosting %v; want 0 < linear < boosting <= 1", lin, gb)
		}
		if !strings.Contains(out, fmt.Sprintf("fork Linear R²: %s", r2[0][2])) ||
			!strings.Contains(out, fmt.Sprintf("fork GradientBoosting R²: %s", r2[1][2])) {
			t.Errorf("fork() branches did not reproduce the R² values")
		}
		sdkPyPass(t, out, "fork flow")
	})

	t.Run("notebook_flow", func(t *testing.T) {
		t.Parallel()
		sdkPyPass(t, sdkPyRun(t, shared, venv, "notebook_flow.py"), "notebook flow")
	})

	t.Run("async_flow", func(t *testing.T) {
		t.Parallel()
		sdkPyPass(t, sdkPyRun(t, shared, venv, "async_flow.py"), "async flow")
	})

	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		out := sdkPyRun(t, shared, venv, "errors.py")
		for _, want := range []string{
			`-> NotFoundError code=not_found status=404 message='sandbox "no-such-sandbox-`,
			"-> InvalidArgumentError code=invalid_argument status=400 message='cpus:",
			"-> CellTimeoutError code=timeout",
			"-> KernelDiedError code=kernel_died",
			"ran out of memory",
			"-> FailedPreconditionError code=failed_precondition status=409",
			"-> ConflictError code=conflict status=409",
			"-> ConnectionFailedError code=unavailable status=0",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		sdkPyPass(t, out, "errors flow")
	})

	t.Run("api_key", func(t *testing.T) {
		t.Parallel()
		const key = "sdk-py-s3cret"
		d, err := startDaemon(filepath.Join(t.TempDir(), "keyed"), []string{"FORKBOX_API_KEY=" + key})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.stop)
		out := sdkPyRun(t, d, venv, "api_key.py", "FORKBOX_API_KEY="+key)
		if n := strings.Count(out, "-> AuthenticationError code=unauthenticated status=401"); n != 2 {
			t.Errorf("%d AuthenticationErrors, want 2 (wrong key, no key)", n)
		}
		sdkPyPass(t, out, "api key flow")
	})

	t.Run("image_build", func(t *testing.T) {
		t.Parallel()
		sdkPyPass(t, sdkPyRun(t, shared, venv, "image_build.py"), "image flow")
	})
}

// sdkPyPass checks a program's closing line.
func sdkPyPass(t *testing.T, out, flow string) {
	t.Helper()
	if !strings.Contains(out, flow+": PASS") {
		t.Errorf("no %q line", flow+": PASS")
	}
}

// sdkPySales is the interpreter loop's data: a CSV of sales by region, the
// profit of each region and the best one, computed here.
func sdkPySales() (csv, best string, bestProfit float64, profits map[string]float64) {
	var b strings.Builder
	b.WriteString("date,region,product,revenue,cost\n")
	regions := []string{"North", "South", "East", "West"}
	profits = map[string]float64{}
	for i := 0; i < 120; i++ {
		region := regions[(i*7)%4]
		revenue := float64(100+(i*37)%250) + 0.25*float64(i%4)
		cost := float64(60+(i*53)%140) + 0.5*float64(i%2)
		if region == "East" {
			revenue += 15
		}
		profits[region] += revenue - cost
		fmt.Fprintf(&b, "2024-%02d-%02d,%s,p%d,%.2f,%.2f\n", 1+i%12, 1+i%28, region, i%3, revenue, cost)
	}
	keys := make([]string, 0, len(profits))
	for k := range profits {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		profits[k] = float64(int64(profits[k]*100+0.5)) / 100
		if best == "" || profits[k] > bestProfit {
			best, bestProfit = k, profits[k]
		}
	}
	return b.String(), best, bestProfit, profits
}

// The scripted model's code: the first cell computes, the second reads the
// first cell's variables.
const (
	sdkPyProfitCode = "import pandas as pd\n" +
		"df = pd.read_csv('/workspace/sales.csv')\n" +
		"df['profit'] = df['revenue'] - df['cost']\n" +
		"by_region = df.groupby('region')['profit'].sum().round(2)\n" +
		"for region, p in by_region.items():\n    print(f'{region} {p:.2f}')"
	sdkPyBestCode = "print('best', by_region.idxmax(), f'{by_region.max():.2f}')"
)

// sdkPyModel is a scripted OpenAI-compatible chat-completions endpoint
// answering plain (non-streaming) JSON: two run_code tool calls, then an
// answer made of what the second one printed.
type sdkPyModel struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []map[string]any
}

func newSDKPyModel(t *testing.T) *sdkPyModel {
	m := &sdkPyModel{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			t.Errorf("model: unexpected %s %s", r.Method, r.URL.Path)
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		if err := json.Unmarshal(body, &req); err != nil {
			t.Errorf("model: request is not JSON: %v", err)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.reqs = append(m.reqs, req)
		n := len(m.reqs) - 1
		m.mu.Unlock()
		tools, _ := req["tools"].([]any)
		if len(tools) != 1 || !strings.Contains(fmt.Sprint(tools[0]), "run_code") {
			t.Errorf("model: request %d offers tools %v, want run_code", n, tools)
		}
		msg := map[string]any{"role": "assistant", "content": nil}
		finish := "tool_calls"
		call := func(id, code string) {
			args, _ := json.Marshal(map[string]string{"code": code})
			msg["tool_calls"] = []any{map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": "run_code", "arguments": string(args)}}}
		}
		switch n {
		case 0:
			call("call_profit", sdkPyProfitCode)
		case 1:
			call("call_best", sdkPyBestCode)
		default:
			out := sdkPyToolText(req, "call_best")
			f := regexp.MustCompile(`best (\S+) (-?[0-9.]+)`).FindStringSubmatch(out)
			if f == nil {
				msg["content"] = "I could not read the result: " + out
			} else {
				msg["content"] = fmt.Sprintf("The most profitable region is %s, with a profit of %s.", f[1], f[2])
			}
			finish = "stop"
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": 1700000000,
			"model":   req["model"],
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   map[string]int{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
		})
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *sdkPyModel) requests() []map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]map[string]any(nil), m.reqs...)
}

// sdkPyToolText is the content of the tool message answering call id.
func sdkPyToolText(req map[string]any, id string) string {
	msgs, _ := req["messages"].([]any)
	for _, mm := range msgs {
		m, _ := mm.(map[string]any)
		if m["role"] == "tool" && m["tool_call_id"] == id {
			s, _ := m["content"].(string)
			return s
		}
	}
	return ""
}
