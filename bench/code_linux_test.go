package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
)

const (
	codeSamples     = 1000 // measured `1+1` cells (and baseline executes)
	codeWarmups     = 20   // unmeasured cells before them (after the kernel start)
	codeTargetMS    = 3    // target: p50 code round trip
	codeTargetRatio = 1.5  // target: forkbox p50 ≤ 1.5 × the jupyter_client floor
	noKernelSamples = 200  // diagnostic: GET /contexts round trips

	salesRows         = 100_000
	groupbySamples    = 50
	groupbyWarmups    = 3
	statelessSamples  = 20
	statelessWarmups  = 2
	sandboxSalesPath  = "/workspace/sales.csv"
	hostPython        = "/usr/bin/python3" // root's PATH may have a pyenv python first
	groupbyCell       = "df.groupby('region')['revenue'].sum()"
	codeCallTimeout   = 2 * time.Minute
	pythonExecTimeout = 10 * time.Minute
)

var salesRegions = []string{"north", "south", "east", "west", "central"}

// jupyterClientScript is the baseline of BenchmarkCodeRoundTrip: the Debian
// jupyter_client (KernelManager + blocking client) driving a local ipykernel
// with the same kernelspec, flags and environment as forkbox's contexts.
// Each timed call is execute('1+1') and the wait for both its execute_reply
// and its idle status on iopub, which is what forkbox waits for too.
//
// argv: warm-up count. It starts the kernel, warms up and prints a JSON line
// (kernel start time, versions). Then, for each line N read from stdin, it
// times N calls and prints a JSON line of their client-side round trips and,
// per call, the kernel's own time (from its busy to its idle status, by the
// kernel's header timestamps), so the benchmark can interleave batches of it
// with forkbox's. On "quit" or EOF it shuts the kernel down and prints the
// p50/p95 of all its calls.
const jupyterClientScript = `
import json, math, os, shutil, sys, tempfile, time
tmp = tempfile.mkdtemp(prefix="forkbox-bench-jc-")
os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(tmp, "runtime")
os.environ["IPYTHONDIR"] = os.path.join(tmp, "ipython")
import jupyter_client, ipykernel
from jupyter_client import KernelManager
warm = int(sys.argv[1])
env = dict(os.environ)
env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
km = KernelManager(kernel_name="python3")
t0 = time.perf_counter()
km.start_kernel(extra_arguments=["--HistoryManager.enabled=False", "--InteractiveShell.colors=NoColor"], env=env)
kc = km.blocking_client()
kc.start_channels()
kernel_ms = []
def run(code):
    msg_id = kc.execute(code)
    reply = None
    while reply is None:
        m = kc.get_shell_msg(timeout=60)
        if m["parent_header"].get("msg_id") == msg_id:
            reply = m
    idle, result, busy_at = False, None, None
    while not idle:
        m = kc.get_iopub_msg(timeout=60)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        t = m["msg_type"]
        if t == "execute_result":
            result = m["content"]["data"].get("text/plain")
        elif t == "status" and m["content"]["execution_state"] == "busy":
            busy_at = m["header"]["date"]
        elif t == "status" and m["content"]["execution_state"] == "idle":
            idle = True
            if busy_at is not None and hasattr(busy_at, "timestamp"):
                kernel_ms.append(round((m["header"]["date"] - busy_at).total_seconds() * 1e3, 4))
    if reply["content"]["status"] != "ok":
        raise RuntimeError("cell failed: %r" % (reply["content"],))
    return result
def pct(v, p):
    v = sorted(v)
    return v[min(max(math.ceil(p / 100 * len(v)), 1), len(v)) - 1] if v else None
everything = []
try:
    kc.wait_for_ready(timeout=120)
    startup_ms = (time.perf_counter() - t0) * 1e3
    r = None
    for _ in range(warm):
        r = run("1+1")
    if r != "2":
        raise RuntimeError("1+1 gave %r" % (r,))
    print(json.dumps({"ready": True, "python": sys.version.split()[0], "jupyter_client": jupyter_client.__version__,
        "ipykernel": ipykernel.__version__, "startup_ms": round(startup_ms, 1)}), flush=True)
    while True:
        line = sys.stdin.readline().strip()
        if line in ("", "quit"):
            break
        del kernel_ms[:]
        samples = []
        for _ in range(int(line)):
            t = time.perf_counter()
            run("1+1")
            samples.append(round((time.perf_counter() - t) * 1e3, 4))
        everything += samples
        print(json.dumps({"samples_ms": samples, "kernel_ms": kernel_ms}), flush=True)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    shutil.rmtree(tmp, ignore_errors=True)
print(json.dumps({"done": True, "n": len(everything), "p50_ms": pct(everything, 50), "p95_ms": pct(everything, 95)}), flush=True)
`

// jupyterClientRun is what jupyterClientScript measured.
type jupyterClientRun struct {
	Python        string  `json:"python"`
	JupyterClient string  `json:"jupyter_client"`
	IPyKernel     string  `json:"ipykernel"`
	StartupMS     float64 `json:"startup_ms"`
	SamplesMS     []float64
	KernelMS      []float64
}

// jupyterClientBatch is one batch line of jupyterClientScript.
type jupyterClientBatch struct {
	SamplesMS []float64 `json:"samples_ms"`
	KernelMS  []float64 `json:"kernel_ms"`
}

// parseJupyterClientOutput reads everything jupyterClientScript printed
// (the exec'd, non-interactive use: all batches requested up front).
func parseJupyterClientOutput(out []byte) (*jupyterClientRun, error) {
	var run jupyterClientRun
	ready := false
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "{") {
			continue // anything the kernel printed to the inherited stdout
		}
		if !ready {
			if json.Unmarshal([]byte(line), &run) == nil {
				ready = true
			}
			continue
		}
		var batch jupyterClientBatch
		if json.Unmarshal([]byte(line), &batch) == nil && batch.SamplesMS != nil {
			run.SamplesMS = append(run.SamplesMS, batch.SamplesMS...)
			run.KernelMS = append(run.KernelMS, batch.KernelMS...)
		}
	}
	if !ready || len(run.SamplesMS) == 0 {
		return nil, fmt.Errorf("jupyter_client script printed no samples:\n%s", out)
	}
	return &run, nil
}

// jupyterClientProc is jupyterClientScript running on the host, driven a
// batch at a time.
type jupyterClientProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr bytes.Buffer
	run    jupyterClientRun
}

// startJupyterClient starts the script and waits until its kernel is warm.
func startJupyterClient() (*jupyterClientProc, error) {
	p := &jupyterClientProc{cmd: exec.Command(hostPython, "-c", jupyterClientScript, strconv.Itoa(codeWarmups))}
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewReaderSize(stdout, 1<<20)
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	if err := p.readJSON(&p.run); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// readJSON reads the script's next JSON line into v.
func (p *jupyterClientProc) readJSON(v any) error {
	for {
		line, err := p.out.ReadString('\n')
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "{") {
			return json.Unmarshal([]byte(t), v)
		}
		if err != nil {
			return fmt.Errorf("jupyter_client baseline: %v; stderr:\n%s", err, p.stderr.String())
		}
	}
}

// batch times n calls.
func (p *jupyterClientProc) batch(n int) error {
	if _, err := fmt.Fprintf(p.stdin, "%d\n", n); err != nil {
		return err
	}
	var b jupyterClientBatch
	if err := p.readJSON(&b); err != nil {
		return err
	}
	if len(b.SamplesMS) != n {
		return fmt.Errorf("jupyter_client baseline: %d samples in a batch of %d", len(b.SamplesMS), n)
	}
	p.run.SamplesMS = append(p.run.SamplesMS, b.SamplesMS...)
	p.run.KernelMS = append(p.run.KernelMS, b.KernelMS...)
	return nil
}

// close ends the script (and its kernel).
func (p *jupyterClientProc) close() {
	p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// codeCaller posts cells to a daemon's /code with plain net/http (no SDK
// method), over its own keep-alive connection.
type codeCaller struct {
	base string
	hc   *http.Client
}

func newCodeCaller(d *daemon) *codeCaller {
	return &codeCaller{base: d.url, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}}}
}

// run runs code in the default context of a sandbox and returns the
// execution; a cell that raised is an error.
func (c *codeCaller) run(ctx context.Context, sandbox, code string) (*api.Execution, error) {
	body, err := json.Marshal(api.RunCodeRequest{Code: code})
	if err != nil {
		return nil, err
	}
	data, err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(sandbox)+"/code", body)
	if err != nil {
		return nil, err
	}
	var ex api.Execution
	if err := json.Unmarshal(data, &ex); err != nil {
		return nil, fmt.Errorf("POST /code: decode answer: %v: %s", err, data)
	}
	if ex.Error != nil {
		return &ex, fmt.Errorf("cell %q raised %s: %s", code, ex.Error.Name, ex.Error.Value)
	}
	return &ex, nil
}

// do sends one request and returns the body of a 2xx answer.
func (c *codeCaller) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(data))
	}
	return data, nil
}

// mainText returns the text of the main result of an execution.
func mainText(ex *api.Execution) string {
	for _, r := range ex.Results {
		if main, _ := r["is_main_result"].(bool); main {
			s, _ := r["text"].(string)
			return s
		}
	}
	return ""
}

// agentCaller talks to a sandbox's agent directly over its Unix socket, the
// way the daemon does, skipping the daemon. Diagnostic only: it relies on
// where the daemon keeps the socket (data/sandboxes/<id>/run/agent.sock) and
// on the agent's NDJSON /code stream, neither of which is public API.
type agentCaller struct{ hc *http.Client }

func newAgentCaller(d *daemon, sandbox string) (*agentCaller, error) {
	var socket string
	for _, pat := range []string{
		filepath.Join(d.dir, "data", "sandboxes", sandbox, "run", "agent.sock"),
		filepath.Join(d.dir, "data", "*", sandbox, "run", "agent.sock"),
	} {
		if m, _ := filepath.Glob(pat); len(m) > 0 {
			socket = m[0]
			break
		}
	}
	if socket == "" {
		return nil, fmt.Errorf("no agent.sock of %s under %s", sandbox, filepath.Join(d.dir, "data"))
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 4,
		DisableCompression:  true,
	}
	return &agentCaller{hc: &http.Client{Transport: tr}}, nil
}

// run posts a cell to the agent's /code and reads its NDJSON events up to
// "done".
func (a *agentCaller) run(ctx context.Context, code string) (*api.Execution, error) {
	body, _ := json.Marshal(map[string]string{"code": code})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://agent/code", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	defer io.Copy(io.Discard, resp.Body) // drain, so the connection is reused
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("agent /code: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev struct {
			Type      string         `json:"type"`
			Text      string         `json:"text"`
			Execution *api.Execution `json:"execution"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("agent /code: bad event: %v: %s", err, sc.Bytes())
		}
		switch ev.Type {
		case "done":
			if ev.Execution == nil {
				return nil, fmt.Errorf("agent /code: done without an execution")
			}
			if ev.Execution.Error != nil {
				return ev.Execution, fmt.Errorf("cell %q raised %s: %s", code, ev.Execution.Error.Name, ev.Execution.Error.Value)
			}
			return ev.Execution, nil
		case "failure":
			return nil, fmt.Errorf("agent /code: %s", ev.Text)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("agent /code: stream ended without done")
}

// timeCalls runs call warm times unmeasured, then n times measured.
func timeCalls(n, warm int, call func() error) (samples, error) {
	return timeCallsAfter(n, warm, 0, call)
}

// timeCallsAfter is timeCalls with an untimed sleep of gap before each call.
func timeCallsAfter(n, warm int, gap time.Duration, call func() error) (samples, error) {
	for range warm {
		if err := call(); err != nil {
			return nil, err
		}
	}
	s := make(samples, 0, n)
	for range n {
		if gap > 0 {
			time.Sleep(gap)
		}
		t := time.Now()
		err := call()
		d := time.Since(t)
		if err != nil {
			return nil, err
		}
		s = append(s, d)
	}
	return s, nil
}

// msSamples turns milliseconds (as Python reports them) into samples.
func msSamples(vs []float64) samples {
	s := make(samples, len(vs))
	for i, v := range vs {
		s[i] = time.Duration(v * float64(time.Millisecond))
	}
	return s
}

// codeSecondsTotals reads the daemon's forkbox_code_seconds histogram sum and
// count from /metrics (the manager's time around the agent call, in full
// precision, unlike the integer duration_ms of an execution).
func (c *codeCaller) codeSecondsTotals(ctx context.Context) (sum, count float64, err error) {
	data, err := c.do(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	sum, count = math.NaN(), math.NaN()
	for _, line := range strings.Split(string(data), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, perr := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if perr != nil {
			continue
		}
		switch name {
		case "forkbox_code_seconds_sum":
			sum = v
		case "forkbox_code_seconds_count":
			count = v
		}
	}
	if math.IsNaN(sum) || math.IsNaN(count) {
		return 0, 0, fmt.Errorf("/metrics has no forkbox_code_seconds histogram")
	}
	return sum, count, nil
}

// codeRoundTrip holds what BenchmarkCodeRoundTrip's parts measured, for the
// tables printed at the end.
type codeRoundTrip struct {
	forkbox, forkboxDaemonMS samples
	forkboxCold              time.Duration
	managerMeanMS            float64 // forkbox_code_seconds mean over the measured forkbox calls
	agent                    samples
	host                     *jupyterClientRun
	inSandbox                *jupyterClientRun
	list                     map[listKey]samples
	inSandboxErr, agentErr   string
}

// listKey names a no-kernel diagnostic: GET /contexts through the daemon or
// straight to the agent, back to back or after an idle gap.
type listKey struct {
	target string // "daemon" or "agent"
	gap    bool
}

const (
	// idleGap is the sleep before each call of the idle no-kernel diagnostic.
	idleGap = 5 * time.Millisecond
	// codeBatch: the measured calls run in rounds, each a batch of this many
	// per system, so that load changes on a shared machine hit all systems
	// alike.
	codeBatch = 100
)

// BenchmarkCodeRoundTrip measures 1,000 cells of `1+1` in one sandbox's
// default Python context (warm: the kernel started and 20 cells ran first),
// timed in the client to the JSON answer of POST /code, next to the floor:
// the Debian jupyter_client driving a local ipykernel on the host, doing the
// same work per call (execute, then wait for the reply and the idle status).
// The measured calls run in 10 rounds of 100 per system, interleaved, with
// the same cells posted straight to the sandbox agent's Unix socket (no
// daemon) as a third system. Diagnostics: the daemon's own timing of the
// agent call (its forkbox_code_seconds histogram), the jupyter_client
// baseline run inside the sandbox (the kernel's own time there), and GET
// /contexts through the daemon and straight to the agent (the hops with no
// kernel).
func BenchmarkCodeRoundTrip(b *testing.B) {
	d := startDaemon(b, false)
	sb := d.createSandbox(b)
	cc := newCodeCaller(d)
	res := codeRoundTrip{managerMeanMS: math.NaN(), list: map[listKey]samples{}}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	// forkbox: the first cell starts the default context's kernel.
	fbCall := func() (*api.Execution, error) {
		cctx, ccancel := context.WithTimeout(ctx, codeCallTimeout)
		defer ccancel()
		return cc.run(cctx, sb.ID, "1+1")
	}
	t := time.Now()
	ex, err := fbCall()
	res.forkboxCold = time.Since(t)
	if err != nil {
		b.Fatalf("first cell: %v\ndaemon log:\n%s", err, d.logTail(20))
	}
	if got := mainText(ex); got != "2" {
		b.Fatalf("1+1 gave %q (results %v)", got, ex.Results)
	}
	var daemonMS samples
	fbTimed := func() error {
		ex, err := fbCall()
		if err == nil {
			daemonMS = append(daemonMS, time.Duration(ex.DurationMS)*time.Millisecond)
		}
		return err
	}

	// agent direct (diagnostic; skipped if the socket is not where expected).
	var agentTimed func() error
	if ac, err := newAgentCaller(d, sb.ID); err != nil {
		res.agentErr = err.Error()
		b.Logf("agent-direct diagnostic skipped: %v", err)
	} else {
		agentTimed = func() error {
			cctx, ccancel := context.WithTimeout(ctx, codeCallTimeout)
			defer ccancel()
			ex, err := ac.run(cctx, "1+1")
			if err == nil && mainText(ex) != "2" {
				err = fmt.Errorf("agent direct: 1+1 gave %q", mainText(ex))
			}
			return err
		}
	}

	// the floor: jupyter_client on the host.
	var jc *jupyterClientProc
	if out, err := exec.Command(hostPython, "-c", "import jupyter_client, ipykernel").CombinedOutput(); err != nil {
		b.Logf("jupyter_client baseline skipped: %s cannot import jupyter_client, ipykernel: %v %s", hostPython, err, bytes.TrimSpace(out))
	} else if jc, err = startJupyterClient(); err != nil {
		b.Fatalf("jupyter_client baseline: %v", err)
	} else {
		defer jc.close()
	}

	// Warm-ups, then the interleaved rounds; the daemon's histogram is read
	// around them, so it covers exactly the measured forkbox calls.
	for range codeWarmups {
		if _, err := fbCall(); err != nil {
			b.Fatal(err)
		}
		if agentTimed != nil {
			if err := agentTimed(); err != nil {
				b.Fatal(err)
			}
		}
	}
	sum0, n0, merr := cc.codeSecondsTotals(ctx)
	type system struct {
		name string
		run  func() error
		out  *samples
	}
	systems := []system{{"forkbox", fbTimed, &res.forkbox}}
	if agentTimed != nil {
		systems = append(systems, system{"agent-direct", agentTimed, &res.agent})
	}
	if jc != nil {
		systems = append(systems, system{"jupyter_client", nil, nil})
	}
	for round := range codeSamples / codeBatch {
		for i := range systems {
			sys := systems[(round+i)%len(systems)]
			if sys.run == nil {
				if err := jc.batch(codeBatch); err != nil {
					b.Fatal(err)
				}
				continue
			}
			s, err := timeCalls(codeBatch, 0, sys.run)
			if err != nil {
				b.Fatalf("%s: %v", sys.name, err)
			}
			*sys.out = append(*sys.out, s...)
		}
	}
	res.forkboxDaemonMS = daemonMS
	if merr == nil {
		if sum1, n1, err := cc.codeSecondsTotals(ctx); err == nil && n1-n0 == float64(len(res.forkbox)) {
			res.managerMeanMS = (sum1 - sum0) / (n1 - n0) * 1e3
		}
	}
	if jc != nil {
		jc.close()
		run := jc.run
		res.host = &run
	}

	b.Run("forkbox", func(b *testing.B) {
		hideNsPerOp(b)
		res.forkbox.report(b, "")
		b.ReportMetric(ms(res.forkboxCold), "cold-first-cell-ms")
		b.ReportMetric(res.managerMeanMS, "daemon-agent-call-mean-ms")
	})
	b.Run("agent-direct", func(b *testing.B) {
		hideNsPerOp(b)
		if res.agent == nil {
			skip(b, "diagnostic skipped: "+res.agentErr)
		}
		res.agent.report(b, "")
	})
	b.Run("jupyter_client-host", func(b *testing.B) {
		hideNsPerOp(b)
		if res.host == nil {
			skip(b, "baseline skipped: "+hostPython+" cannot import jupyter_client and ipykernel (Debian python3-jupyter-client, python3-ipykernel)")
		}
		s := msSamples(res.host.SamplesMS)
		s.report(b, "")
		b.ReportMetric(msSamples(res.host.KernelMS).p50(), "kernel-busy-idle-p50-ms")
		b.ReportMetric(res.forkbox.p50()/s.p50(), "forkbox-over-floor-p50")
	})

	// No kernel: GET /contexts answers from the agent's memory, so these
	// are the two hops alone, back to back and then after 5 ms of idle
	// time before each call (about what a cell leaves the daemon and the
	// agent idle for: waking them then costs more).
	b.Run("no-kernel", func(b *testing.B) {
		hideNsPerOp(b)
		daemonGet := func() error {
			_, err := cc.do(ctx, http.MethodGet, "/v1/sandboxes/"+sb.ID+"/contexts", nil)
			return err
		}
		var agentGet func() error
		if ac, err := newAgentCaller(d, sb.ID); err == nil {
			agentGet = func() error {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/contexts", nil)
				resp, err := ac.hc.Do(req)
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("agent GET /contexts: HTTP %d", resp.StatusCode)
				}
				return err
			}
		}
		for _, gap := range []time.Duration{0, idleGap} {
			for _, target := range []struct {
				name string
				call func() error
			}{{"daemon", daemonGet}, {"agent", agentGet}} {
				if target.call == nil {
					continue
				}
				s, err := timeCallsAfter(noKernelSamples, codeWarmups, gap, target.call)
				if err != nil {
					b.Fatal(err)
				}
				res.list[listKey{target.name, gap > 0}] = s
				b.ReportMetric(s.p50(), fmt.Sprintf("%s-contexts-gap%dms-p50-ms", target.name, gap.Milliseconds()))
			}
		}
	})

	// The baseline script inside the sandbox, through forkbox exec: the
	// kernel's own time there (same interpreter, same flags).
	b.Run("jupyter_client-in-sandbox", func(b *testing.B) {
		hideNsPerOp(b)
		ectx, ecancel := context.WithTimeout(ctx, pythonExecTimeout)
		defer ecancel()
		timeout := pythonExecTimeout.Seconds()
		var stdin strings.Builder
		for range codeSamples / codeBatch {
			fmt.Fprintf(&stdin, "%d\n", codeBatch)
		}
		stdin.WriteString("quit\n")
		r, err := d.client.Exec(ectx, sb.ID, api.ExecRequest{
			Cmd: hostPython, Args: []string{"-c", jupyterClientScript, strconv.Itoa(codeWarmups)},
			Stdin: stdin.String(), TimeoutSecs: &timeout,
		})
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s %s", r.ExitCode, r.Error, r.Stderr)
		}
		var run *jupyterClientRun
		if err == nil {
			run, err = parseJupyterClientOutput([]byte(r.Stdout))
		}
		if err != nil {
			res.inSandboxErr = err.Error()
			skip(b, "diagnostic skipped: jupyter_client in the sandbox: "+err.Error())
		}
		res.inSandbox = run
		msSamples(run.SamplesMS).report(b, "")
		b.ReportMetric(msSamples(run.KernelMS).p50(), "kernel-busy-idle-p50-ms")
	})

	printCodeRoundTrip(&res)
	d.deleteSandbox(b, sb.ID)
}

func printCodeRoundTrip(res *codeRoundTrip) {
	floor := math.NaN()
	if res.host != nil {
		floor = msSamples(res.host.SamplesMS).p50()
	}
	fb := res.forkbox
	ratio := fb.p50() / floor
	tableTitle("code round trip of `1+1`, warm default context (10 interleaved rounds of 100 calls per system)")
	tableHeader("system", "n", "p50 ms", "p95 ms", "mean ms",
		fmt.Sprintf("target p50 ≤ %d ms", codeTargetMS), fmt.Sprintf("target p50 ≤ %.1f× floor", codeTargetRatio))
	tableRow("forkbox `POST /code` (JSON), client-side", fmt.Sprint(len(fb)), f(fb.p50()), f(fb.p95()), f(fb.mean()),
		verdict(fb.p50(), codeTargetMS), fmt.Sprintf("%s (%.2f×)", verdict(ratio, codeTargetRatio), ratio))
	if res.host != nil {
		s := msSamples(res.host.SamplesMS)
		tableRow(fmt.Sprintf("baseline (floor): jupyter_client %s → local ipykernel %s on the host", res.host.JupyterClient, res.host.IPyKernel),
			fmt.Sprint(len(s)), f(s.p50()), f(s.p95()), f(s.mean()), verdict(s.p50(), codeTargetMS), "1×")
	} else {
		tableRow("baseline (floor): jupyter_client on the host", "skipped", "", "", "", "", "")
	}
	if res.agent != nil {
		a := res.agent
		tableRow("diagnostic: the same cells straight to the agent's Unix socket (no daemon)", fmt.Sprint(len(a)), f(a.p50()), f(a.p95()), f(a.mean()), "", "")
	}

	tableTitle("where a forkbox `1+1` round trip goes")
	tableHeader("path", "n", "p50 ms", "p95 ms", "mean ms")
	tableRow("client → daemon (HTTP) → agent (Unix socket) → kernel, JSON answer", fmt.Sprint(len(fb)), f(fb.p50()), f(fb.p95()), f(fb.mean()))
	tableRow("  daemon: its time around the agent call (`forkbox_code_seconds`, same calls)", fmt.Sprint(len(fb)), "", "", f(res.managerMeanMS))
	tableRow("  daemon: `duration_ms` of the answers (the same, in whole ms)", fmt.Sprint(len(res.forkboxDaemonMS)),
		f(res.forkboxDaemonMS.p50()), f(res.forkboxDaemonMS.p95()), f(res.forkboxDaemonMS.mean()))
	if res.agent != nil {
		a := res.agent
		tableRow("agent direct: `POST /code` on the agent's Unix socket (no daemon), NDJSON to `done`", fmt.Sprint(len(a)), f(a.p50()), f(a.p95()), f(a.mean()))
	} else {
		tableRow("agent direct", "skipped: "+res.agentErr, "", "", "")
	}
	if res.inSandbox != nil {
		s, k := msSamples(res.inSandbox.SamplesMS), msSamples(res.inSandbox.KernelMS)
		tableRow("jupyter_client inside the sandbox (the baseline script through forkbox exec; not interleaved)", fmt.Sprint(len(s)), f(s.p50()), f(s.p95()), f(s.mean()))
		tableRow("  kernel's own time inside the sandbox: busy → idle status", fmt.Sprint(len(k)), f(k.p50()), f(k.p95()), f(k.mean()))
	} else if res.inSandboxErr != "" {
		tableRow("jupyter_client inside the sandbox", "skipped: "+strings.ReplaceAll(res.inSandboxErr, "\n", " "), "", "", "")
	}
	if res.host != nil {
		s, k := msSamples(res.host.SamplesMS), msSamples(res.host.KernelMS)
		tableRow("jupyter_client on the host (the floor)", fmt.Sprint(len(s)), f(s.p50()), f(s.p95()), f(s.mean()))
		tableRow("  kernel's own time on the host: busy → idle status", fmt.Sprint(len(k)), f(k.p50()), f(k.p95()), f(k.mean()))
	}
	for _, k := range []listKey{{"daemon", false}, {"agent", false}, {"daemon", true}, {"agent", true}} {
		s, ok := res.list[k]
		if !ok {
			continue
		}
		what := "`GET /v1/sandboxes/{id}/contexts` (client → daemon → agent)"
		if k.target == "agent" {
			what = "agent `GET /contexts` on its Unix socket"
		}
		when := "back to back"
		if k.gap {
			when = fmt.Sprintf("after %d ms idle", idleGap.Milliseconds())
		}
		tableRow(fmt.Sprintf("no kernel, %s: %s", when, what), fmt.Sprint(len(s)), f(s.p50()), f(s.p95()), f(s.mean()))
	}
	tableRow("first cell after sandbox create (starts the kernel; not in the samples)", "1", f(ms(res.forkboxCold)), "", "")
	if res.host != nil {
		tableRow("jupyter_client kernel start on the host (`start_kernel` → `wait_for_ready`)", "1", f(res.host.StartupMS), "", "")
	}
}

// tableTitle prints a title line for the next table.
func tableTitle(title string) {
	fmt.Println()
	fmt.Println("**" + title + "**")
}

// makeSalesCSV returns a deterministic CSV of n rows: region (5 values),
// product (200 values), units (1–50) and revenue (units × a price, 2
// decimals).
func makeSalesCSV(n int) []byte {
	rng := rand.New(rand.NewPCG(3, 2026))
	var buf bytes.Buffer
	buf.Grow(n * 32)
	buf.WriteString("region,product,units,revenue\n")
	for range n {
		region := salesRegions[rng.IntN(len(salesRegions))]
		product := rng.IntN(200)
		units := 1 + rng.IntN(50)
		price := 1 + float64(rng.IntN(20000))/100
		fmt.Fprintf(&buf, "%s,P%03d,%d,%.2f\n", region, product, units, float64(units)*price)
	}
	return buf.Bytes()
}

// statelessScript is the stateless baseline: a fresh interpreter that loads
// the CSV and runs the group-by, every time.
func statelessScript(path string) string {
	return fmt.Sprintf(`import pandas as pd; df = pd.read_csv(%q); print(df.groupby("region")["revenue"].sum())`, path)
}

// inProcessGroupbyScript times the group-by alone in one Python process (no
// kernel, no RPC): the compute floor. Prints JSON of the samples in ms.
func inProcessGroupbyScript(path string) string {
	return fmt.Sprintf(`
import json, time
import pandas as pd
df = pd.read_csv(%q)
for _ in range(%d):
    df.groupby("region")["revenue"].sum()
s = []
for _ in range(%d):
    t = time.perf_counter()
    r = df.groupby("region")["revenue"].sum()
    s.append(round((time.perf_counter() - t) * 1e3, 4))
print(json.dumps({"samples_ms": s, "regions": len(r)}))
`, path, groupbyWarmups, groupbySamples)
}

// inKernelGroupbyCell times the group-by inside the context that holds df
// and prints the times (ms) as JSON.
var inKernelGroupbyCell = fmt.Sprintf(`import json as _fb_json, time as _fb_time
_fb_s = []
for _ in range(%d):
    _fb_t = _fb_time.perf_counter()
    df.groupby('region')['revenue'].sum()
    _fb_s.append(round((_fb_time.perf_counter() - _fb_t) * 1e3, 4))
print(_fb_json.dumps(_fb_s))
del _fb_json, _fb_time, _fb_s, _fb_t`, groupbySamples)

// checkRegions fails unless out names every region.
func checkRegions(what, out string) error {
	for _, r := range salesRegions {
		if !strings.Contains(out, r) {
			return fmt.Errorf("%s: output does not name region %q:\n%s", what, r, out)
		}
	}
	return nil
}

// statefulVsStateless holds what BenchmarkStatefulVsStateless measured.
type statefulVsStateless struct {
	load                time.Duration // the cell loading the CSV into df
	upload              time.Duration
	forkbox             samples
	host, sandboxExec   samples
	inProcess, inKernel samples
	hostErr             string
	csvBytes            int
}

// statefulRounds: the measured calls of BenchmarkStatefulVsStateless run in
// this many interleaved rounds (5 group-bys in forkbox, 2 stateless runs on
// the host, 2 through forkbox exec per round).
const statefulRounds = 10

// BenchmarkStatefulVsStateless compares a group-by over a 100,000-row CSV
// already loaded into a DataFrame in a forkbox context (50 calls) with the
// stateless way: a fresh python3 that imports pandas, reads the CSV and runs
// the group-by (20 runs on the host), interleaved in 10 rounds. Diagnostics:
// the stateless script run through forkbox exec inside the sandbox
// (interleaved too), and the group-by alone timed in one Python process.
func BenchmarkStatefulVsStateless(b *testing.B) {
	csv := makeSalesCSV(salesRows)
	hostPath := filepath.Join(b.TempDir(), "sales.csv")
	if err := os.WriteFile(hostPath, csv, 0o644); err != nil {
		b.Fatal(err)
	}
	d := startDaemon(b, false)
	sb := d.createSandbox(b)
	cc := newCodeCaller(d)
	res := statefulVsStateless{csvBytes: len(csv)}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	t := time.Now()
	if _, err := d.client.WriteFile(ctx, sb.ID, sandboxSalesPath, bytes.NewReader(csv), 0o644); err != nil {
		b.Fatalf("upload %s: %v", sandboxSalesPath, err)
	}
	res.upload = time.Since(t)
	if _, err := cc.run(ctx, sb.ID, "1+1"); err != nil { // start the kernel
		b.Fatalf("first cell: %v\ndaemon log:\n%s", err, d.logTail(20))
	}
	t = time.Now()
	ex, err := cc.run(ctx, sb.ID, fmt.Sprintf("import pandas as pd\ndf = pd.read_csv(%q)\nlen(df)", sandboxSalesPath))
	res.load = time.Since(t)
	if err != nil {
		b.Fatal(err)
	}
	if got := mainText(ex); got != strconv.Itoa(salesRows) {
		b.Fatalf("len(df) = %q, want %d", got, salesRows)
	}

	type system struct {
		name        string
		warm, batch int
		run         func() error
		out         *samples
	}
	systems := []system{{"forkbox", groupbyWarmups, groupbySamples / statefulRounds, func() error {
		ex, err := cc.run(ctx, sb.ID, groupbyCell)
		if err == nil {
			err = checkRegions("forkbox group-by", mainText(ex))
		}
		return err
	}, &res.forkbox}}
	if out, err := exec.Command(hostPython, "-c", "import pandas").CombinedOutput(); err != nil {
		res.hostErr = fmt.Sprintf("%s cannot import pandas (Debian python3-pandas): %v %s", hostPython, err, bytes.TrimSpace(out))
	} else {
		script := statelessScript(hostPath)
		systems = append(systems, system{"host-stateless", statelessWarmups, statelessSamples / statefulRounds, func() error {
			out, err := exec.Command(hostPython, "-c", script).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s -c %q: %v\n%s", hostPython, script, err, out)
			}
			return checkRegions("stateless python3", string(out))
		}, &res.host})
	}
	sandboxScript := statelessScript(sandboxSalesPath)
	systems = append(systems, system{"forkbox-exec-stateless", statelessWarmups, statelessSamples / statefulRounds, func() error {
		r, err := d.client.Exec(ctx, sb.ID, api.ExecRequest{Cmd: hostPython, Args: []string{"-c", sandboxScript}})
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s %s", r.ExitCode, r.Error, r.Stderr)
		}
		if err == nil {
			err = checkRegions("forkbox exec of python3", r.Stdout)
		}
		return err
	}, &res.sandboxExec})

	for _, sys := range systems {
		if _, err := timeCalls(0, sys.warm, sys.run); err != nil {
			b.Fatalf("%s: %v", sys.name, err)
		}
	}
	for round := range statefulRounds {
		for i := range systems {
			sys := systems[(round+i)%len(systems)]
			s, err := timeCalls(sys.batch, 0, sys.run)
			if err != nil {
				b.Fatalf("%s: %v", sys.name, err)
			}
			*sys.out = append(*sys.out, s...)
		}
	}

	// The group-by alone, timed inside the context's kernel: what the
	// cell computes, without the round trip.
	ex, err = cc.run(ctx, sb.ID, inKernelGroupbyCell)
	if err != nil {
		b.Fatal(err)
	}
	var inKernel []float64
	if err := json.Unmarshal([]byte(strings.Join(ex.Logs.Stdout, "")), &inKernel); err != nil || len(inKernel) != groupbySamples {
		b.Fatalf("in-kernel group-by timing printed %q (%v)", ex.Logs.Stdout, err)
	}
	res.inKernel = msSamples(inKernel)

	b.Run("forkbox", func(b *testing.B) {
		hideNsPerOp(b)
		res.forkbox.report(b, "")
		b.ReportMetric(ms(res.load), "load-csv-ms")
		b.ReportMetric(res.inKernel.p50(), "in-kernel-groupby-p50-ms")
	})
	b.Run("host-stateless", func(b *testing.B) {
		hideNsPerOp(b)
		if res.host == nil {
			skip(b, "baseline skipped: "+res.hostErr)
		}
		res.host.report(b, "")
		b.ReportMetric(res.host.p50()/res.forkbox.p50(), "stateless-over-forkbox-p50")
	})
	b.Run("forkbox-exec-stateless", func(b *testing.B) {
		hideNsPerOp(b)
		res.sandboxExec.report(b, "")
	})
	b.Run("host-in-process", func(b *testing.B) {
		hideNsPerOp(b)
		if res.host == nil {
			skip(b, "diagnostic skipped: "+res.hostErr)
		}
		out, err := exec.Command(hostPython, "-c", inProcessGroupbyScript(hostPath)).Output()
		if err != nil {
			b.Fatalf("in-process group-by: %v", err)
		}
		var run struct {
			SamplesMS []float64 `json:"samples_ms"`
			Regions   int       `json:"regions"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(out), &run); err != nil || run.Regions != len(salesRegions) {
			b.Fatalf("in-process group-by printed %s (%v)", out, err)
		}
		res.inProcess = msSamples(run.SamplesMS)
		res.inProcess.report(b, "")
	})

	printStatefulVsStateless(&res)
	d.deleteSandbox(b, sb.ID)
}

func printStatefulVsStateless(res *statefulVsStateless) {
	fb := res.forkbox
	tableTitle(fmt.Sprintf("group-by over a %d-row CSV (%.1f MB)", salesRows, float64(res.csvBytes)/1e6))
	tableHeader("how", "n", "p50 ms", "p95 ms", "mean ms", "p50 vs forkbox")
	tableRow("forkbox, stateful: `"+groupbyCell+"` in the context that loaded df", fmt.Sprint(len(fb)), f(fb.p50()), f(fb.p95()), f(fb.mean()), "1×")
	if res.host != nil {
		s := res.host
		tableRow("baseline, stateless: fresh `python3 -c 'import pandas; read_csv; groupby'` on the host", fmt.Sprint(len(s)), f(s.p50()), f(s.p95()), f(s.mean()),
			fmt.Sprintf("%.0f× slower", s.p50()/fb.p50()))
	}
	if res.sandboxExec != nil {
		s := res.sandboxExec
		tableRow("diagnostic: the same stateless script through forkbox exec in the sandbox", fmt.Sprint(len(s)), f(s.p50()), f(s.p95()), f(s.mean()),
			fmt.Sprintf("%.0f× slower", s.p50()/fb.p50()))
	}
	if res.inProcess != nil {
		s := res.inProcess
		tableRow("diagnostic: the group-by alone, timed inside one Python process on the host", fmt.Sprint(len(s)), f(s.p50()), f(s.p95()), f(s.mean()), "")
	}
	if res.inKernel != nil {
		s := res.inKernel
		tableRow("diagnostic: the group-by alone, timed inside the forkbox context's kernel (in the sandbox)", fmt.Sprint(len(s)), f(s.p50()), f(s.p95()), f(s.mean()), "")
	}
	tableRow("one-time: load cell `df = pd.read_csv(...)` in the context (imports pandas)", "1", f(ms(res.load)), "", "", "")
	tableRow("one-time: upload of sales.csv through PUT /files", "1", f(ms(res.upload)), "", "", "")
}

func TestMakeSalesCSV(t *testing.T) {
	data := makeSalesCSV(1000)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if lines[0] != "region,product,units,revenue" || len(lines) != 1001 {
		t.Fatalf("header %q, %d lines; want the header and 1000 rows", lines[0], len(lines))
	}
	if err := checkRegions("csv", string(data)); err != nil {
		t.Error(err)
	}
	for _, l := range lines[1:] {
		if f := strings.Split(l, ","); len(f) != 4 {
			t.Fatalf("row %q: %d fields", l, len(f))
		}
	}
	if !bytes.Equal(data, makeSalesCSV(1000)) {
		t.Error("makeSalesCSV is not deterministic")
	}
}

func TestParseJupyterClientOutput(t *testing.T) {
	out := "noise from the kernel\n" +
		`{"ready": true, "python": "3.11.2", "jupyter_client": "7.4.9", "ipykernel": "6.17.0", "startup_ms": 1500.5}` + "\n" +
		`{"samples_ms": [1.5, 2.5], "kernel_ms": [1.0, 1.1]}` + "\n" +
		`{"samples_ms": [3.5], "kernel_ms": [1.2]}` + "\n" +
		`{"done": true, "n": 3, "p50_ms": 2.5, "p95_ms": 3.5}` + "\n"
	run, err := parseJupyterClientOutput([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if run.JupyterClient != "7.4.9" || run.StartupMS != 1500.5 || len(run.SamplesMS) != 3 || len(run.KernelMS) != 3 || run.SamplesMS[2] != 3.5 {
		t.Errorf("parsed %+v", run)
	}
	if _, err := parseJupyterClientOutput([]byte("Traceback ...\n")); err == nil {
		t.Error("output without samples: want an error")
	}
}
