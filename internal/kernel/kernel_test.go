package kernel

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// These tests run a real ipykernel: /usr/bin/python3 with ipykernel,
// matplotlib and pandas (Debian's python3-ipykernel, python3-matplotlib,
// python3-pandas). The launcher runs the kernel with PATH=/usr/bin:/bin (a
// pyenv python3 may come first on the caller's PATH), a scratch HOME and
// MPLBACKEND=Agg, as the sandbox's env has.

const hostPython = "/usr/bin/python3"

func requireIPyKernel(t *testing.T) {
	t.Helper()
	cmd := exec.Command(hostPython, "-c", "import ipykernel, matplotlib, pandas")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("%s cannot import ipykernel, matplotlib and pandas (install python3-ipykernel python3-matplotlib python3-pandas): %v\n%s", hostPython, err, out)
	}
}

// testLauncher starts kernels with os/exec, as the agent does with its reaper.
func testLauncher(home string) Launcher {
	return func(argv, env []string, dir string) (int, <-chan ExitInfo, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = mergeEnv([]string{"PATH=/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8", "MPLBACKEND=Agg"}, env)
		cmd.Dir = dir
		// Its own process group: ipykernel's interrupt_request signals its group.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if os.Getenv("KERNEL_TEST_LOG") != "" {
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		}
		if err := cmd.Start(); err != nil {
			return 0, nil, err
		}
		exited := make(chan ExitInfo, 1)
		go func() {
			cmd.Wait()
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			ei := ExitInfo{Code: ws.ExitStatus()}
			if ws.Signaled() {
				ei = ExitInfo{Code: -1, Signal: unix.SignalName(ws.Signal())}
			}
			exited <- ei
		}()
		return cmd.Process.Pid, exited, nil
	}
}

func startPython(t *testing.T) *Kernel {
	t.Helper()
	return startPythonWith(t, nil)
}

// startPythonWith starts a Python kernel whose messages go to onMessage.
func startPythonWith(t *testing.T, onMessage func(*Message)) *Kernel {
	t.Helper()
	requireIPyKernel(t)
	home := t.TempDir()
	specs, err := FindSpecs(DefaultSpecDirs(home))
	if err != nil {
		t.Logf("kernelspecs: %v", err)
	}
	spec, err := Resolve(specs, "python")
	if err != nil {
		t.Skipf("no python kernelspec: %v", err)
	}
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	began := time.Now()
	k, err := Start(ctx, Options{
		Spec:       spec,
		Cwd:        home,
		Env:        []string{"FORKBOX_TEST=1"},
		RuntimeDir: filepath.Join(t.TempDir(), "runtime"),
		Launch:     testLauncher(home),
		Logger:     log,
		OnMessage:  onMessage,
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("kernel %s (%+v) ready in %s", spec.Name, k.Info(), time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := k.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return k
}

// run executes code with a generous timeout and fails the test on a Go error.
func run(t *testing.T, k *Kernel, code string) *Execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := k.Execute(ctx, code, nil)
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return ex
}

func mainText(t *testing.T, ex *Execution) string {
	t.Helper()
	for _, r := range ex.Results {
		if r["is_main_result"] == true {
			s, _ := r["text"].(string)
			return s
		}
	}
	t.Fatalf("no main result in %s", dump(ex))
	return ""
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func wantNoError(t *testing.T, ex *Execution) {
	t.Helper()
	if ex.Error != nil {
		t.Fatalf("unexpected error %s", dump(ex.Error))
	}
}

func isPNG(s string) bool {
	b, err := base64.StdEncoding.DecodeString(s)
	return err == nil && strings.HasPrefix(string(b), "\x89PNG\r\n\x1a\n")
}

// TestPython runs one kernel through what docs/API.md ("The execution result")
// promises. Subtests run in order on the same kernel; the first ones rely on
// being its first cells.
func TestPython(t *testing.T) {
	t.Parallel()
	k := startPython(t)

	t.Run("state and execution_count", func(t *testing.T) {
		ex := run(t, k, "sales = [120, 95]")
		wantNoError(t, ex)
		if ex.ExecutionCount != 1 || len(ex.Results) != 0 {
			t.Errorf("first cell: count %d results %s, want count 1 (setup does not count) and no results", ex.ExecutionCount, dump(ex.Results))
		}
		ex = run(t, k, "sum(sales)")
		want := []Result{{"text": "215", "is_main_result": true}}
		if ex.Error != nil || ex.ExecutionCount != 2 || !reflect.DeepEqual(ex.Results, want) {
			t.Errorf("got %s, want results %s, execution_count 2, error null", dump(ex), dump(want))
		}
		if got := dump(ex); got != `{"logs":{"stdout":[],"stderr":[]},"results":[{"is_main_result":true,"text":"215"}],"error":null,"execution_count":2}` {
			t.Errorf("JSON = %s", got)
		}
	})

	t.Run("history disabled", func(t *testing.T) {
		ex := run(t, k, "get_ipython().history_manager.enabled")
		wantNoError(t, ex)
		if got := mainText(t, ex); got != "False" {
			t.Errorf("history_manager.enabled = %s", got)
		}
	})

	t.Run("info", func(t *testing.T) {
		info := k.Info()
		if info.Language != "python" || info.Implementation != "ipython" || !strings.HasPrefix(info.ProtocolVersion, "5.") {
			t.Errorf("info = %+v", info)
		}
		if k.PID() <= 0 || k.ExitInfo() != nil {
			t.Errorf("pid %d exit %v", k.PID(), k.ExitInfo())
		}
	})

	t.Run("round trip", func(t *testing.T) {
		const n = 50
		began := time.Now()
		for i := range n {
			if ex := run(t, k, "1"); mainText(t, ex) != "1" {
				t.Fatalf("run %d: %s", i, dump(ex))
			}
		}
		t.Logf("trivial execute round trip: %s", (time.Since(began) / n).Round(time.Microsecond))
	})

	t.Run("stdout and stderr", func(t *testing.T) {
		ex := run(t, k, "import sys\nprint('out1')\nprint('err1', file=sys.stderr)\nprint('out2')")
		wantNoError(t, ex)
		if got := strings.Join(ex.Logs.Stdout, ""); got != "out1\nout2\n" {
			t.Errorf("stdout = %q", ex.Logs.Stdout)
		}
		if got := strings.Join(ex.Logs.Stderr, ""); got != "err1\n" {
			t.Errorf("stderr = %q", ex.Logs.Stderr)
		}
		if len(ex.Results) != 0 {
			t.Errorf("results = %s", dump(ex.Results))
		}
	})

	t.Run("pandas DataFrame", func(t *testing.T) {
		ex := run(t, k, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
		wantNoError(t, ex)
		if len(ex.Results) != 1 {
			t.Fatalf("results = %s", dump(ex.Results))
		}
		r := ex.Results[0]
		text, _ := r["text"].(string)
		html, _ := r["html"].(string)
		if r["is_main_result"] != true || !strings.Contains(text, "a  b") || !strings.Contains(html, "<table") {
			t.Errorf("result = %s", dump(r))
		}
	})

	t.Run("matplotlib figure without show", func(t *testing.T) {
		ex := run(t, k, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])")
		wantNoError(t, ex)
		var pngs []Result
		for _, r := range ex.Results {
			if s, ok := r["png"].(string); ok {
				if !isPNG(s) {
					t.Errorf("png is not base64 PNG: %.40q", s)
				}
				pngs = append(pngs, r)
			}
		}
		if len(pngs) != 1 {
			t.Fatalf("want 1 png, results %d: %.300s", len(ex.Results), dump(ex.Results))
		}
		if text, _ := pngs[0]["text"].(string); !strings.HasPrefix(text, "<Figure") {
			t.Errorf("figure text = %q", text)
		}
		if pngs[0]["is_main_result"] != nil {
			t.Errorf("a figure is not the main result")
		}
		// The figure was closed: the next cell shows nothing.
		if ex := run(t, k, "x = 1"); len(ex.Results) != 0 {
			t.Errorf("next cell results %.300s", dump(ex.Results))
		}
	})

	t.Run("two figures", func(t *testing.T) {
		ex := run(t, k, "plt.figure(); plt.plot([1]); plt.figure(); plt.bar([1], [2]);")
		wantNoError(t, ex)
		n := 0
		for _, r := range ex.Results {
			if s, ok := r["png"].(string); ok && isPNG(s) {
				n++
			}
		}
		if n != 2 || len(ex.Results) != 2 {
			t.Errorf("want 2 png results, got %d of %d", n, len(ex.Results))
		}
	})

	t.Run("IPython.display formats", func(t *testing.T) {
		ex := run(t, k, `from IPython.display import display, Markdown, HTML, JSON, SVG, Latex
display(Markdown("**hi**"))
display(HTML("<b>x</b>"))
display(JSON({"a": 1, "b": [True, None]}))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"></svg>'))
display(Latex(r"$x^2$"))
display({"application/vnd.custom+json": {"k": 1}, "text/plain": "custom"}, raw=True)`)
		wantNoError(t, ex)
		if len(ex.Results) != 6 {
			t.Fatalf("results = %s", dump(ex.Results))
		}
		checks := []struct{ key, contains string }{
			{"markdown", "**hi**"}, {"html", "<b>x</b>"}, {"json", ""}, {"svg", "<svg"}, {"latex", "x^2"},
		}
		for i, c := range checks {
			r := ex.Results[i]
			v, ok := r[c.key]
			if !ok || r["is_main_result"] != nil {
				t.Errorf("result %d = %s, want key %s", i, dump(r), c.key)
				continue
			}
			if s, isStr := v.(string); c.contains != "" && (!isStr || !strings.Contains(s, c.contains)) {
				t.Errorf("%s = %v", c.key, v)
			}
		}
		if got := dump(ex.Results[2]["json"]); got != `{"a":1,"b":[true,null]}` {
			t.Errorf("json stays JSON: %s", got)
		}
		if got := dump(ex.Results[5]); got != `{"extra":{"application/vnd.custom+json":{"k":1}},"text":"custom"}` {
			t.Errorf("unknown MIME type: %s", got)
		}
	})

	t.Run("clear_output and update_display_data", func(t *testing.T) {
		ex := run(t, k, `from IPython.display import display, clear_output
display("a"); clear_output(); display("b")
display("c"); clear_output(wait=True); print("p"); display("d")
h = display("x", display_id=True); h.update("y")`)
		wantNoError(t, ex)
		var texts []string
		for _, r := range ex.Results {
			texts = append(texts, r["text"].(string))
		}
		if want := []string{"'d'", "'y'"}; !reflect.DeepEqual(texts, want) {
			t.Errorf("results %q, want %q", texts, want)
		}
		if !reflect.DeepEqual(ex.Logs.Stdout, []string{"p\n"}) {
			t.Errorf("logs are kept: %q", ex.Logs.Stdout)
		}
		ex = run(t, k, `h.update("z")`)
		if len(ex.Results) != 1 || ex.Results[0]["text"] != "'z'" {
			t.Errorf("update of an earlier cell's display: %s", dump(ex.Results))
		}
	})

	t.Run("runtime error", func(t *testing.T) {
		ex := run(t, k, "1/0")
		if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || ex.Error.Value != "division by zero" || len(ex.Error.Traceback) == 0 {
			t.Fatalf("error = %s", dump(ex.Error))
		}
		for _, line := range ex.Error.Traceback {
			if strings.Contains(line, "\x1b") {
				t.Errorf("ANSI escape in traceback: %q", line)
			}
		}
		if ex.ExecutionCount == 0 || len(ex.Results) != 0 {
			t.Errorf("execution %s", dump(ex))
		}
	})

	t.Run("syntax error runs nothing", func(t *testing.T) {
		ex := run(t, k, "print('ran')\nx = (\n")
		if ex.Error == nil || ex.Error.Name != "SyntaxError" {
			t.Fatalf("error = %s", dump(ex.Error))
		}
		if len(ex.Logs.Stdout) != 0 {
			t.Errorf("code ran: stdout %q", ex.Logs.Stdout)
		}
		for _, line := range ex.Error.Traceback {
			if strings.Contains(line, "\x1b") {
				t.Errorf("ANSI escape in traceback: %q", line)
			}
		}
	})

	t.Run("events stream while the cell runs", func(t *testing.T) {
		flag := filepath.Join(t.TempDir(), "go")
		code := fmt.Sprintf(`import os, time
print("a")
while not os.path.exists(%q):
    time.sleep(0.02)
print("b", flush=True)
import sys; print("e", file=sys.stderr, flush=True)
display("shown")
1/0`, flag)
		var (
			events   []Event
			returned atomic.Bool
		)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ex, err := k.Execute(ctx, code, func(e Event) {
			if returned.Load() {
				t.Errorf("event after Execute returned: %+v", e)
			}
			events = append(events, e)
			if e.Type == "stdout" && e.Text == "a\n" {
				os.WriteFile(flag, nil, 0o644) // the cell waits for this
			}
		})
		returned.Store(true)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range events {
			switch e.Type {
			case "stdout", "stderr":
				got = append(got, e.Type+":"+e.Text)
			case "result":
				got = append(got, "result:"+e.Result["text"].(string))
			case "error":
				got = append(got, "error:"+e.Error.Name)
			}
		}
		want := []string{"stdout:a\n", "stdout:b\n", "stderr:e\n", "result:'shown'", "error:ZeroDivisionError"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("events %q, want %q", got, want)
		}
		if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || len(ex.Results) != 1 {
			t.Errorf("execution %s", dump(ex))
		}
	})

	t.Run("timeout interrupts and keeps variables", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var events []Event
		began := time.Now()
		ex, err := k.Execute(ctx, "import time\ny = 5\nprint('started', flush=True)\ntime.sleep(30)", func(e Event) { events = append(events, e) })
		took := time.Since(began)
		if err != nil {
			t.Fatal(err)
		}
		if ex.Error == nil || ex.Error.Name != "TimeoutError" || ex.Error.Traceback == nil || len(ex.Error.Traceback) != 0 {
			t.Fatalf("error = %s", dump(ex.Error))
		}
		if took > 5*time.Second {
			t.Errorf("took %s", took)
		}
		if !reflect.DeepEqual(ex.Logs.Stdout, []string{"started\n"}) {
			t.Errorf("stdout = %q", ex.Logs.Stdout)
		}
		if last := events[len(events)-1]; last.Type != "error" || last.Error.Name != "TimeoutError" {
			t.Errorf("last event %+v", last)
		}
		for _, e := range events[:len(events)-1] {
			if e.Type == "error" {
				t.Errorf("the interrupt's own error is not an event: %+v", e)
			}
		}
		t.Logf("timed out after %s: %s", took.Round(time.Millisecond), ex.Error.Value)
		if got := mainText(t, run(t, k, "y")); got != "5" {
			t.Errorf("y = %s", got)
		}
	})

	t.Run("cancel interrupts", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(500*time.Millisecond, cancel)
		ex, err := k.Execute(ctx, "import time\nw = 7\ntime.sleep(30)", nil)
		if err != nil {
			t.Fatal(err)
		}
		if ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" {
			t.Fatalf("error = %s", dump(ex.Error))
		}
		if got := mainText(t, run(t, k, "w")); got != "7" {
			t.Errorf("w = %s", got)
		}
	})

	t.Run("Interrupt", func(t *testing.T) {
		interrupted := make(chan struct{})
		time.AfterFunc(500*time.Millisecond, func() {
			defer close(interrupted)
			if err := k.Interrupt(); err != nil {
				t.Errorf("Interrupt: %v", err)
			}
		})
		ex := run(t, k, "import time\ntime.sleep(30)")
		<-interrupted
		if ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" {
			t.Fatalf("error = %s", dump(ex.Error))
		}
	})

	t.Run("FIFO", func(t *testing.T) {
		flag := filepath.Join(t.TempDir(), "go")
		first := make(chan *Execution, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ex, _ := k.Execute(ctx, fmt.Sprintf("import os, time\norder = []\nwhile not os.path.exists(%q): time.sleep(0.02)", flag), nil)
			first <- ex
		}()
		time.Sleep(100 * time.Millisecond)
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if ex, err := k.Execute(ctx, fmt.Sprintf("order.append(%d)", i), nil); err != nil || ex.Error != nil {
					t.Errorf("cell %d: %v %s", i, err, dump(ex))
				}
			}()
			time.Sleep(30 * time.Millisecond)
		}
		os.WriteFile(flag, nil, 0o644)
		wg.Wait()
		if ex := <-first; ex == nil || ex.Error != nil {
			t.Fatalf("first cell: %s", dump(ex))
		}
		if got := mainText(t, run(t, k, "order")); got != "[0, 1, 2, 3, 4]" {
			t.Errorf("order = %s", got)
		}
	})

	t.Run("deadline while queued", func(t *testing.T) {
		flag := filepath.Join(t.TempDir(), "go")
		first := make(chan *Execution, 1)
		go func() {
			ex, _ := k.Execute(context.Background(), fmt.Sprintf("import os, time\nwhile not os.path.exists(%q): time.sleep(0.02)", flag), nil)
			first <- ex
		}()
		time.Sleep(100 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		ex, err := k.Execute(ctx, "queued = 1", nil)
		os.WriteFile(flag, nil, 0o644)
		<-first
		if err != nil || ex.Error == nil || ex.Error.Name != "TimeoutError" || ex.ExecutionCount != 0 {
			t.Fatalf("got %v %s", err, dump(ex))
		}
		if ex := run(t, k, "queued"); ex.Error == nil || ex.Error.Name != "NameError" {
			t.Errorf("the queued cell ran: %s", dump(ex))
		}
		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		if _, err := k.Execute(ctx, "1", nil); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled before start: %v", err)
		}
	})

	t.Run("Shutdown", func(t *testing.T) {
		pid := k.PID()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		began := time.Now()
		if err := k.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("shutdown took %s, exit %v", time.Since(began).Round(time.Millisecond), k.ExitInfo())
		if ei := k.ExitInfo(); ei == nil {
			t.Error("no ExitInfo after Shutdown")
		} else if *ei != (ExitInfo{}) {
			// ipykernel normally exits 0 within a second; under heavy load it
			// may be killed after the grace, and pyzmq sometimes aborts at exit.
			t.Logf("the kernel did not exit cleanly on shutdown_request: %v", ei)
		}
		select {
		case <-k.Dead():
		default:
			t.Fatal("Dead not closed after Shutdown")
		}
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("kernel process %d still there", pid)
		}
		matches, _ := filepath.Glob(filepath.Join(filepath.Dir(k.proc().connFile), "*"))
		if len(matches) != 0 {
			t.Errorf("runtime dir not clean: %v", matches)
		}
		if _, err := k.Execute(ctx, "1", nil); !errors.Is(err, ErrDead) {
			t.Errorf("Execute after Shutdown: %v", err)
		}
		if err := k.Restart(ctx); !errors.Is(err, ErrDead) {
			t.Errorf("Restart after Shutdown: %v", err)
		}
	})
}

// TestPythonDeathAndRestart kills its kernel in the ways a sandbox sees and
// brings it back with Restart.
func TestPythonDeathAndRestart(t *testing.T) {
	t.Parallel()
	k := startPython(t)
	restart := func(t *testing.T) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		began := time.Now()
		if err := k.Restart(ctx); err != nil {
			t.Fatalf("Restart: %v", err)
		}
		t.Logf("restart took %s", time.Since(began).Round(time.Millisecond))
		select {
		case <-k.Dead():
			t.Fatal("Dead closed after Restart")
		default:
		}
	}

	t.Run("interrupt_mode message", func(t *testing.T) {
		// ipykernel serves interrupt_request too (its kernelspec says
		// "signal"). It ignores a later shutdown_request then; the restart
		// that follows kills it anyway.
		p := k.proc()
		p.interruptMode = "message"
		defer func() { p.interruptMode = "signal" }()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		began := time.Now()
		ex, err := k.Execute(ctx, "import time\nm = 3\ntime.sleep(30)", nil)
		if err != nil {
			t.Fatal(err)
		}
		if ex.Error == nil || ex.Error.Name != "TimeoutError" || time.Since(began) > 5*time.Second {
			t.Fatalf("error = %s after %s", dump(ex.Error), time.Since(began))
		}
		if got := mainText(t, run(t, k, "m")); got != "3" {
			t.Errorf("m = %s", got)
		}
	})

	t.Run("os._exit", func(t *testing.T) {
		run(t, k, "v = 1")
		// The sleep lets the kernel's ZeroMQ thread send "bye": os._exit
		// drops what it has not sent yet.
		ex := run(t, k, "print('bye', flush=True)\nimport os, time\ntime.sleep(0.05)\nos._exit(3)")
		if ex.Error == nil || ex.Error.Name != "KernelDied" || !strings.Contains(ex.Error.Value, "code 3") {
			t.Fatalf("error = %s", dump(ex.Error))
		}
		if !reflect.DeepEqual(ex.Logs.Stdout, []string{"bye\n"}) {
			t.Errorf("output before death lost: %q", ex.Logs.Stdout)
		}
		select {
		case <-k.Dead():
		default:
			t.Fatal("Dead not closed")
		}
		if ei := k.ExitInfo(); ei == nil || ei.Code != 3 || ei.Signal != "" {
			t.Errorf("ExitInfo = %+v", ei)
		}
		_, err := k.Execute(context.Background(), "1", nil)
		if !errors.Is(err, ErrDead) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("Execute on a dead kernel: %v", err)
		}
		t.Logf("dead: %v", err)
		if err := k.Interrupt(); !errors.Is(err, ErrDead) {
			t.Errorf("Interrupt on a dead kernel: %v", err)
		}
	})

	t.Run("restart after death", func(t *testing.T) {
		restart(t)
		ex := run(t, k, "v")
		if ex.Error == nil || ex.Error.Name != "NameError" || ex.ExecutionCount != 1 {
			t.Errorf("variables survived a restart or count did not restart: %s", dump(ex))
		}
	})

	t.Run("segfault", func(t *testing.T) {
		ex := run(t, k, "import ctypes\nctypes.string_at(0)")
		if ex.Error == nil || ex.Error.Name != "KernelDied" || !strings.Contains(ex.Error.Value, "SIGSEGV") {
			t.Fatalf("error = %s", dump(ex.Error))
		}
		t.Logf("segfault: %s", ex.Error.Value)
		restart(t)
	})

	t.Run("restart while a cell runs", func(t *testing.T) {
		if ex := run(t, k, "v = 2"); ex.ExecutionCount != 1 {
			t.Errorf("count after restart = %d", ex.ExecutionCount)
		}
		running := make(chan *Execution, 1)
		go func() {
			ex, _ := k.Execute(context.Background(), "import time\ntime.sleep(30)", nil)
			running <- ex
		}()
		time.Sleep(200 * time.Millisecond)
		queued := make(chan *Execution, 1)
		go func() {
			ex, _ := k.Execute(context.Background(), "'queued' if 'v' not in globals() else 'old kernel'", nil)
			queued <- ex
		}()
		time.Sleep(100 * time.Millisecond)
		restart(t)
		ex := <-running
		if ex == nil || ex.Error == nil || ex.Error.Name != "KernelDied" || !strings.Contains(ex.Error.Value, "restarted") {
			t.Errorf("running cell: %s", dump(ex))
		}
		ex = <-queued
		if ex == nil || ex.Error != nil || mainText(t, ex) != "'queued'" || ex.ExecutionCount != 1 {
			t.Errorf("queued cell: %s", dump(ex))
		}
	})
}

// TestStartFailure: a kernel that exits at once is reported with its exit.
func TestStartFailure(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	spec := &Spec{Name: "broken", Language: "python", Argv: []string{"/bin/sh", "-c", "exit 7", "{connection_file}"}, InterruptMode: "signal"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt := filepath.Join(t.TempDir(), "rt")
	_, err := Start(ctx, Options{Spec: spec, RuntimeDir: rt, Launch: testLauncher(home)})
	if err == nil || !strings.Contains(err.Error(), "exited with code 7") {
		t.Fatalf("Start = %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(rt, "*")); len(m) != 0 {
		t.Errorf("left behind %v", m)
	}
	// A kernel that never answers: ctx ends the start, and the process is killed.
	spec.Argv = []string{"/bin/sleep", "60"}
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Start(ctx, Options{Spec: spec, RuntimeDir: rt, Launch: testLauncher(home)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start = %v", err)
	}
}

// TestExecuteAround: setup and teardown run silently in the cell's turn and
// do not count; the cell sees what setup did.
func TestExecuteAround(t *testing.T) {
	k := startPython(t)
	ctx := context.Background()
	ex, err := k.ExecuteAround(ctx, "import os; os.environ['FB_X'] = 'set'", "import os; print(os.environ.get('FB_X'))",
		"os.environ.pop('FB_X', None)", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantNoError(t, ex)
	if strings.Join(ex.Logs.Stdout, "") != "set\n" || ex.ExecutionCount != 1 {
		t.Fatalf("cell with setup: %s", dump(ex))
	}
	ex = run(t, k, "import os; print(os.environ.get('FB_X'))")
	if strings.Join(ex.Logs.Stdout, "") != "None\n" || ex.ExecutionCount != 2 {
		t.Fatalf("after teardown: %s", dump(ex))
	}
}

// TestExecuteAroundDeadlineInSetup: a deadline that falls within the setup
// is the cell's timeout (it did not run), not a failure of the call; the
// teardown still undoes the setup. (The random-input run got a 500 "cell
// setup failed: TimeoutError" for a /code call with a tiny timeout.)
func TestExecuteAroundDeadlineInSetup(t *testing.T) {
	k := startPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	ex, err := k.ExecuteAround(ctx, "import os, time; os.environ['FB_Y'] = 'set'; time.sleep(5)", "print('ran')",
		"import os; os.environ.pop('FB_Y', None)", nil)
	if err != nil {
		t.Fatalf("a deadline within the setup: %v; want a TimeoutError execution", err)
	}
	if ex.Error == nil || ex.Error.Name != "TimeoutError" || len(ex.Logs.Stdout) != 0 {
		t.Fatalf("a deadline within the setup: %s", dump(ex))
	}
	ex = run(t, k, "import os; print(os.environ.get('FB_Y'))")
	if strings.Join(ex.Logs.Stdout, "") != "None\n" {
		t.Fatalf("the teardown did not run after the setup timed out: %s", dump(ex))
	}
}
