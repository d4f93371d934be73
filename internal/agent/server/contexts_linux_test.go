package server

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/agent/client"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/kernel"
)

// Code contexts with the host's python3 and ipykernel (kernelAgent).

// runCell runs code and returns its end, failing the test if the call fails.
func runCell(t *testing.T, ctx context.Context, c *testAgent, req *wire.CodeRequest) *client.CodeDone {
	t.Helper()
	done, err := c.RunCode(ctx, req, nil)
	if err != nil {
		t.Fatalf("RunCode(%q): %v", req.Code, err)
	}
	return done
}

func stdout(done *client.CodeDone) string { return strings.Join(done.Execution.Logs.Stdout, "") }

// contextNamed returns the listed context id, if any.
func contextNamed(t *testing.T, ctx context.Context, c *testAgent, id string) *api.Context {
	t.Helper()
	list, err := c.ListContexts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, cx := range list {
		if cx.ID == id {
			return &cx
		}
	}
	return nil
}

// TestCodeDefaultContext: a prestarted kernel stays hidden until the first
// cell, which it then runs; cells stream their output, raise, see their own
// environment, time out with their variables kept, and a kernel that dies
// is replaced by the next cell.
func TestCodeDefaultContext(t *testing.T) {
	_, c := kernelAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	if err := c.Prestart(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if list, err := c.ListContexts(ctx); err != nil || len(list) != 0 {
		t.Fatalf("contexts after a prestart: %+v, %v", list, err)
	}
	if err := c.Prestart(ctx, "python"); err != nil {
		t.Fatalf("a second prestart: %v", err)
	}
	wantKind(t, "prestart of an unknown language", c.Prestart(ctx, "cobol"), errdefs.ErrInvalidArgument)

	var mu sync.Mutex
	var events []string
	done, err := c.RunCode(ctx, &wire.CodeRequest{Code: "import os, sys\nprint('out')\nprint('err', file=sys.stderr)\nx = 6\nx * 7"},
		func(ev wire.CodeEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch ev.Type {
			case "result":
				events = append(events, "result:"+ev.Result["text"].(string))
			default:
				events = append(events, ev.Type+":"+ev.Text)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if got := strings.Join(events, "|"); got != "stdout:out\n|stderr:err\n|result:42" {
		t.Errorf("events %q", got)
	}
	mu.Unlock()
	if done.ContextID != "default-python3" || done.PID <= 0 || done.Execution.ExecutionCount != 1 || done.Execution.Error != nil {
		t.Errorf("done %+v, execution %+v", done, done.Execution)
	}
	cx := contextNamed(t, ctx, c, "default-python3")
	if cx == nil || !cx.Default || cx.State != "idle" || cx.ExecutionCount != 1 || cx.Language != "python" || cx.Kernel != "python3" {
		t.Fatalf("the default context: %+v", cx)
	}
	if os.Geteuid() == 0 {
		// A kernel starts as the user with no supplementary groups.
		if out := stdout(runCell(t, ctx, c, &wire.CodeRequest{Code: "print(os.getuid(), os.getgroups())"})); out != "0 []\n" {
			t.Errorf("the kernel's uid and groups: %q", out)
		}
	}

	if ex := runCell(t, ctx, c, &wire.CodeRequest{Code: "1/0"}).Execution; ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || len(ex.Error.Traceback) == 0 {
		t.Errorf("an error: %+v", ex.Error)
	}
	env := "print(os.environ.get('FB_CELL'))"
	if out := stdout(runCell(t, ctx, c, &wire.CodeRequest{Code: env, Env: map[string]string{"FB_CELL": "this cell"}})); out != "this cell\n" {
		t.Errorf("the cell's environment: %q", out)
	}
	if out := stdout(runCell(t, ctx, c, &wire.CodeRequest{Code: env})); out != "None\n" {
		t.Errorf("the next cell's environment: %q", out)
	}
	ex := runCell(t, ctx, c, &wire.CodeRequest{Code: "import time; time.sleep(30)", TimeoutMS: 500}).Execution
	if ex.Error == nil || ex.Error.Name != "TimeoutError" {
		t.Errorf("a timeout: %+v", ex.Error)
	}
	if out := stdout(runCell(t, ctx, c, &wire.CodeRequest{Code: "print(x)", Context: "default-python3", Language: "python"})); out != "6\n" {
		t.Errorf("after the timeout: %q", out)
	}

	// Refusals.
	for _, tc := range []struct {
		what string
		req  wire.CodeRequest
		kind error
	}{
		{"an unknown language", wire.CodeRequest{Code: "1", Language: "cobol"}, errdefs.ErrInvalidArgument},
		{"another language", wire.CodeRequest{Code: "1", Context: "default-python3", Language: "r"}, errdefs.ErrInvalidArgument},
		{"an unknown context", wire.CodeRequest{Code: "1", Context: "ctx_00000000"}, errdefs.ErrNotFound},
	} {
		_, err := c.RunCode(ctx, &tc.req, nil)
		wantKind(t, tc.what, err, tc.kind)
	}

	// A kernel that dies: the cell says so, the context shows it, the next
	// cell runs in a fresh kernel.
	ex = runCell(t, ctx, c, &wire.CodeRequest{Code: "os._exit(3)"}).Execution
	if ex.Error == nil || ex.Error.Name != "KernelDied" {
		t.Errorf("a death: %+v", ex.Error)
	}
	waitFor(t, "a dead context", func() bool { return contextNamed(t, ctx, c, "default-python3").State == "dead" })
	again := runCell(t, ctx, c, &wire.CodeRequest{Code: "print('again')"})
	if stdout(again) != "again\n" || again.PID == done.PID {
		t.Errorf("after the death: %q, pid %d (was %d)", stdout(again), again.PID, done.PID)
	}
}

// TestCodeContextLifecycle: a context made with its cwd and environment,
// its id chosen or refused, interrupted, restarted (also once dead) and
// deleted.
func TestCodeContextLifecycle(t *testing.T) {
	s, c := kernelAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cwd := s.cfg.WorkDir + "/project"

	for what, req := range map[string]*wire.CreateContextRequest{
		"a cwd with ..":          {Cwd: "../x"},
		"a cwd in /proc":         {Cwd: "/proc/self"},
		"a cwd that is not":      {Cwd: "/no/such/dir-forkbox"},
		"an unknown language":    {Language: "cobol"},
		"a malformed context id": {ID: "ctx_XYZ"},
	} {
		_, err := c.CreateContext(ctx, req)
		wantKind(t, what, err, errdefs.ErrInvalidArgument)
	}
	// (The agent makes a missing cwd beneath the sandbox's root, and checks
	// it where its kernels run: here, beneath the host's.)
	if err := os.Mkdir(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	made, err := c.CreateContext(ctx, &wire.CreateContextRequest{ID: "ctx_0000beef", Cwd: cwd, Env: []string{"FB_CTX=yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if made.ID != "ctx_0000beef" || made.Cwd != cwd || made.State != "idle" || made.Default || made.Language != "python" {
		t.Errorf("made %+v", made)
	}
	_, err = c.CreateContext(ctx, &wire.CreateContextRequest{ID: "ctx_0000beef"})
	wantKind(t, "an id in use", err, errdefs.ErrConflict)
	rnd, err := c.CreateContext(ctx, &wire.CreateContextRequest{Language: "python3"})
	if err != nil || !strings.HasPrefix(rnd.ID, "ctx_") || len(rnd.ID) != len("ctx_")+16 {
		t.Fatalf("a random id: %+v, %v", rnd, err)
	}
	if err := c.DeleteContext(ctx, rnd.ID); err != nil {
		t.Fatal(err)
	}

	out := stdout(runCell(t, ctx, c, &wire.CodeRequest{Code: "import os\nprint(os.getcwd(), os.environ['FB_CTX'])\nv = 1", Context: "ctx_0000beef"}))
	if out != cwd+" yes\n" {
		t.Errorf("cwd and env: %q", out)
	}

	// An interrupt stops the running cell; the context keeps its state.
	// (Only once the cell runs: the context is busy from the call's start,
	// and ipykernel ignores SIGINT between cells.)
	running := make(chan *client.CodeDone, 1)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		done, err := c.RunCode(ctx, &wire.CodeRequest{Code: "import time\nprint('running', flush=True)\nwhile True: time.sleep(0.05)", Context: "ctx_0000beef"},
			func(ev wire.CodeEvent) {
				if ev.Type == "stdout" {
					once.Do(func() { close(started) })
				}
			})
		if err != nil {
			t.Errorf("the interrupted cell: %v", err)
		}
		running <- done
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the cell did not start")
	}
	if cx := contextNamed(t, ctx, c, "ctx_0000beef"); cx.State != "busy" {
		t.Errorf("a context running a cell: %+v", cx)
	}
	if _, err := c.InterruptContext(ctx, "ctx_0000beef"); err != nil {
		t.Fatal(err)
	}
	select {
	case done := <-running:
		if done == nil || done.Execution.Error == nil || done.Execution.Error.Name != "KeyboardInterrupt" {
			t.Errorf("the interrupted cell ended %+v", done)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the interrupt did not stop the cell")
	}
	if out := stdout(runCell(t, ctx, c, &wire.CodeRequest{Code: "print(v)", Context: "ctx_0000beef"})); out != "1\n" {
		t.Errorf("after the interrupt: %q", out)
	}

	// A restart forgets the variables and the count.
	after, err := c.RestartContext(ctx, "ctx_0000beef")
	if err != nil || after.ExecutionCount != 0 || after.State != "idle" {
		t.Fatalf("restart: %+v, %v", after, err)
	}
	if ex := runCell(t, ctx, c, &wire.CodeRequest{Code: "v", Context: "ctx_0000beef"}).Execution; ex.Error == nil || ex.Error.Name != "NameError" {
		t.Errorf("after the restart: %+v", ex.Error)
	}
	// A restart of a dead kernel starts a new one.
	runCell(t, ctx, c, &wire.CodeRequest{Code: "import os; os._exit(1)", Context: "ctx_0000beef"})
	waitFor(t, "a dead context", func() bool { return contextNamed(t, ctx, c, "ctx_0000beef").State == "dead" })
	if after, err := c.RestartContext(ctx, "ctx_0000beef"); err != nil || after.State != "idle" {
		t.Errorf("restart of a dead kernel: %+v, %v", after, err)
	}

	if err := c.DeleteContext(ctx, "ctx_0000beef"); err != nil {
		t.Fatal(err)
	}
	if cx := contextNamed(t, ctx, c, "ctx_0000beef"); cx != nil {
		t.Errorf("listed after its deletion: %+v", cx)
	}
	wantKind(t, "delete again", c.DeleteContext(ctx, "ctx_0000beef"), errdefs.ErrNotFound)
	_, err = c.InterruptContext(ctx, "ctx_0000beef")
	wantKind(t, "interrupt of a deleted context", err, errdefs.ErrNotFound)
	_, err = c.RestartContext(ctx, "ctx_0000beef")
	wantKind(t, "restart of a deleted context", err, errdefs.ErrNotFound)
	_, err = c.RunCode(ctx, &wire.CodeRequest{Code: "1", Context: "ctx_0000beef"}, nil)
	wantKind(t, "a cell in a deleted context", err, errdefs.ErrNotFound)
}

// TestContextsWithoutKernels: what needs no kernel: a context not started
// yet is listed as new and interrupted as a no-op; a kernels' directory
// that could not be made fails every start with the reason; per-cell
// environments are Python's.
func TestContextsWithoutKernels(t *testing.T) {
	s, _ := testServer(t)
	s.kernelDirErr = errors.New("no kernels in this test")
	c := serveTestAgent(t, s)
	ctx := context.Background()
	addTestContext(s, "ctx_0000abcd")
	list, err := c.ListContexts(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "ctx_0000abcd" || list[0].State != "new" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if cx, err := c.InterruptContext(ctx, "ctx_0000abcd"); err != nil || cx.State != "new" {
		t.Errorf("interrupt of a new context: %+v, %v", cx, err)
	}
	if _, err := c.RestartContext(ctx, "ctx_0000abcd"); err == nil || !strings.Contains(err.Error(), "no kernels in this test") {
		t.Errorf("restart without kernels: %v", err)
	}
	if _, err := s.resolveSpec("python"); err == nil {
		if _, err := c.RunCode(ctx, &wire.CodeRequest{Code: "1"}, nil); err == nil || !strings.Contains(err.Error(), "no kernels in this test") {
			t.Errorf("a cell without kernels: %v", err)
		}
	}
	for what, body := range map[string]string{"code": `{"code":`, "contexts": `[`, "contexts/prestart": `{"language":1}`} {
		wantKind(t, what, c.send(ctx, "POST", "/"+what, body), errdefs.ErrInvalidArgument)
	}

	if _, _, err := envAround(&kernel.Spec{Name: "ir", Language: "R"}, map[string]string{"A": "1"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a per-cell env in R: %v", err)
	}
	if setup, teardown, err := envAround(&kernel.Spec{Name: "ir", Language: "R"}, nil); setup != "" || teardown != "" || err != nil {
		t.Errorf("no env in R: %q %q %v", setup, teardown, err)
	}
}
