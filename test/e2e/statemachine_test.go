package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/chat/chattest"
)

// The state-machine test: every operation of the API, the chat and MCP, in
// every state a sandbox can be in, answers a defined status (2xx, or 4xx
// with a message) within a bound, and the sandbox can always be deleted
// afterwards with nothing left behind. Before this test, a checkpoint or
// fork of a suspended sandbox panicked and left its lifecycle lock held, so
// the next checkpoint and DELETE hung until the daemon restarted.
//
// The transient states are held open with the daemon's FORKBOX_HOLD_DIR
// hooks (an operation waits at a named point while a file exists), and the
// daemon's lock-wait ceiling is short, so a call that meets a held sandbox
// answers 409 busy quickly instead of waiting out the hold.

// smBound is how long any one call may take before it counts as a hang.
// It covers the lock-wait ceiling (2 s) plus a memory checkpoint and two
// restores on a loaded 2-core machine; it is a hang detector, not a speed
// target.
const smBound = 90 * time.Second

// smSubject is the sandbox under test: a conversation's sandbox, so that a
// chat turn can address it too.
type smSubject struct {
	conv string // conversation id ("" while it is being created)
	id   string // sandbox id
	name string // sandbox name
}

// smEnv is what the operations need.
type smEnv struct {
	t    *testing.T
	d    *daemon
	hold string // the daemon's FORKBOX_HOLD_DIR
	mcp  *mcp.ClientSession
	hc   *http.Client
}

// smResult is one call's outcome.
type smResult struct {
	status  int // HTTP status; for MCP tools 200 or 400 (tool error)
	message string
	took    time.Duration
	err     error  // transport: a dropped connection or a timeout
	skip    string // why the operation does not apply in this state
	body    string
}

// do sends one request and reads the whole answer.
func (e *smEnv) do(method, path, ctype string, body []byte) smResult {
	return e.doAccept(method, path, ctype, "", body)
}

// doAccept is do with an Accept header (an event stream is read whole too).
func (e *smEnv) doAccept(method, path, ctype, accept string, body []byte) smResult {
	start := time.Now()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequest(method, "http://"+e.d.addr+path, rd)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return smResult{err: err, took: time.Since(start)}
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := smResult{status: resp.StatusCode, took: time.Since(start), err: err, body: string(raw)}
	if resp.StatusCode >= 300 {
		var eb api.Error
		if jerr := json.Unmarshal(raw, &eb); jerr != nil {
			r.message = "(not the JSON error shape) " + string(raw)
		} else {
			r.message = eb.Error.Message
		}
	}
	return r
}

func (e *smEnv) json(method, path string, v any) smResult {
	var b []byte
	if v != nil {
		b, _ = json.Marshal(v)
	}
	return e.do(method, path, "application/json", b)
}

// tool calls an MCP tool; a tool error counts as a 4xx with its text.
func (e *smEnv) tool(name string, args map[string]any) smResult {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), smBound)
	defer cancel()
	res, err := e.mcp.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return smResult{err: err, took: time.Since(start)}
	}
	r := smResult{status: 200, took: time.Since(start)}
	if res.IsError {
		r.status, r.message = 400, mcpText(res)
	}
	return r
}

// contextID is the id of one of the subject's code contexts when it has
// one that can be listed now (else a made-up one, which gets a 4xx).
func (e *smEnv) contextID(s *smSubject) string {
	list, err := e.d.c.ListContexts(ctxT(e.t), s.id)
	if err == nil && len(list.Contexts) > 0 {
		return list.Contexts[0].ID
	}
	return "ctx-unknown"
}

// smOp is one operation, run against the subject.
type smOp struct {
	name string
	run  func(e *smEnv, s *smSubject) smResult
}

func smOps() []smOp {
	sbx := func(s *smSubject, rest string) string { return "/v1/sandboxes/" + s.id + rest }
	return []smOp{
		{"get", func(e *smEnv, s *smSubject) smResult { return e.json("GET", sbx(s, ""), nil) }},
		{"list", func(e *smEnv, s *smSubject) smResult { return e.json("GET", "/v1/sandboxes?name="+s.name, nil) }},
		{"exec", func(e *smEnv, s *smSubject) smResult {
			return e.json("POST", sbx(s, "/exec"), api.ExecRequest{Cmd: "echo", Args: []string{"ok"}})
		}},
		{"exec-sse", func(e *smEnv, s *smSubject) smResult {
			b, _ := json.Marshal(api.ExecRequest{Cmd: "echo", Args: []string{"ok"}})
			r := e.doAccept("POST", sbx(s, "/exec"), "application/json", "text/event-stream", b)
			if r.status == 200 && !strings.Contains(r.body, "event: exit") && !strings.Contains(r.body, "event: error") {
				r.status, r.message = 500, "event stream ended without exit or error: "+r.body
			}
			return r
		}},
		{"code", func(e *smEnv, s *smSubject) smResult { return e.json("POST", sbx(s, "/code"), py("1 + 1")) }},
		{"file-write", func(e *smEnv, s *smSubject) smResult {
			return e.do("PUT", sbx(s, "/files?path=/workspace/sm.txt"), "application/octet-stream", []byte("state machine"))
		}},
		{"file-read", func(e *smEnv, s *smSubject) smResult {
			return e.json("GET", sbx(s, "/files?path=/etc/os-release"), nil)
		}},
		{"file-list", func(e *smEnv, s *smSubject) smResult {
			return e.json("GET", sbx(s, "/files/list?path=/workspace"), nil)
		}},
		{"file-remove", func(e *smEnv, s *smSubject) smResult {
			return e.json("DELETE", sbx(s, "/files?path=/workspace/no-such-file"), nil)
		}},
		{"context-create", func(e *smEnv, s *smSubject) smResult {
			return e.json("POST", sbx(s, "/contexts"), api.CreateContextRequest{Language: "python"})
		}},
		{"context-list", func(e *smEnv, s *smSubject) smResult { return e.json("GET", sbx(s, "/contexts"), nil) }},
		{"context-interrupt", func(e *smEnv, s *smSubject) smResult {
			return e.json("POST", sbx(s, "/contexts/"+e.contextID(s)+"/interrupt"), nil)
		}},
		{"context-restart", func(e *smEnv, s *smSubject) smResult {
			return e.json("POST", sbx(s, "/contexts/"+e.contextID(s)+"/restart"), nil)
		}},
		{"context-delete", func(e *smEnv, s *smSubject) smResult {
			return e.json("DELETE", sbx(s, "/contexts/no-such-context"), nil)
		}},
		{"checkpoint-filesystem", func(e *smEnv, s *smSubject) smResult {
			return e.json("POST", sbx(s, "/checkpoint"), api.CheckpointRequest{Type: api.SnapshotFilesystem})
		}},
		{"checkpoint-memory", func(e *smEnv, s *smSubject) smResult {
			return e.json("POST", sbx(s, "/checkpoint"), api.CheckpointRequest{Type: api.SnapshotMemory})
		}},
		{"fork", func(e *smEnv, s *smSubject) smResult {
			return e.json("POST", sbx(s, "/fork"), api.ForkRequest{Count: 2})
		}},
		{"snapshots", func(e *smEnv, s *smSubject) smResult { return e.json("GET", "/v1/snapshots?sandbox="+s.id, nil) }},
		{"update-network", func(e *smEnv, s *smSubject) smResult {
			return e.json("PATCH", sbx(s, ""), api.UpdateSandboxRequest{Network: &api.NetworkPolicy{}})
		}},
		// A pool claim and a create that ask for the subject's name: a
		// conflict while the subject lives, a new sandbox once it is gone.
		{"pool-claim", func(e *smEnv, s *smSubject) smResult {
			return e.json("POST", "/v1/sandboxes", api.CreateSandboxRequest{Pool: "smpool", Name: s.name})
		}},
		{"create-same-name", func(e *smEnv, s *smSubject) smResult {
			return e.json("POST", "/v1/sandboxes", api.CreateSandboxRequest{Name: s.name})
		}},
		{"mcp-run_code", func(e *smEnv, s *smSubject) smResult {
			return e.tool("run_code", map[string]any{"sandbox": s.id, "code": "2 + 2"})
		}},
		{"mcp-run_command", func(e *smEnv, s *smSubject) smResult {
			return e.tool("run_command", map[string]any{"sandbox": s.id, "command": "echo ok"})
		}},
		{"mcp-write_file", func(e *smEnv, s *smSubject) smResult {
			return e.tool("write_file", map[string]any{"sandbox": s.id, "path": "/workspace/mcp.txt", "content": "x"})
		}},
		{"mcp-read_file", func(e *smEnv, s *smSubject) smResult {
			return e.tool("read_file", map[string]any{"sandbox": s.id, "path": "/etc/os-release"})
		}},
		{"mcp-checkpoint", func(e *smEnv, s *smSubject) smResult {
			return e.tool("checkpoint", map[string]any{"sandbox": s.id, "type": "memory"})
		}},
		{"mcp-fork", func(e *smEnv, s *smSubject) smResult {
			return e.tool("fork", map[string]any{"sandbox": s.id, "count": 1})
		}},
		{"mcp-list_snapshots", func(e *smEnv, s *smSubject) smResult {
			return e.tool("list_snapshots", map[string]any{"sandbox": s.id})
		}},
		{"mcp-list_sandboxes", func(e *smEnv, s *smSubject) smResult { return e.tool("list_sandboxes", map[string]any{}) }},
		{"resume", func(e *smEnv, s *smSubject) smResult { return e.json("POST", sbx(s, "/resume"), nil) }},
		{"suspend", func(e *smEnv, s *smSubject) smResult { return e.json("POST", sbx(s, "/suspend"), nil) }},
		{"mcp-resume", func(e *smEnv, s *smSubject) smResult { return e.tool("resume", map[string]any{"sandbox": s.id}) }},
		{"mcp-suspend", func(e *smEnv, s *smSubject) smResult { return e.tool("suspend", map[string]any{"sandbox": s.id}) }},
		// Last: a chat turn may replace a conversation's dead sandbox.
		{"chat", func(e *smEnv, s *smSubject) smResult {
			if s.conv == "" {
				return smResult{skip: "a conversation is recorded only once its sandbox exists, so no chat turn can address one whose sandbox is still being created"}
			}
			return e.json("POST", "/v1/chat", api.ChatRequest{Question: "state machine question", ConversationID: s.conv})
		}},
	}
}

// check asserts a defined answer: 2xx, or 4xx with a message; no 5xx, no
// dropped connection, within the bound.
func (e *smEnv) check(state api.SandboxState, op string, r smResult) {
	e.t.Helper()
	switch {
	case r.skip != "":
		e.t.Logf("[%s] %-22s does not apply: %s", state, op, r.skip)
	case r.err != nil:
		e.t.Errorf("[%s] %s: no answer (dropped connection or hang) after %s: %v", state, op, r.took.Round(time.Millisecond), r.err)
	case r.status >= 500 || r.status < 200 || (r.status >= 300 && r.status < 400):
		e.t.Errorf("[%s] %s: status %d: %s", state, op, r.status, r.message)
	case r.status >= 400 && strings.TrimSpace(r.message) == "":
		e.t.Errorf("[%s] %s: status %d without a message", state, op, r.status)
	case r.took > smBound:
		e.t.Errorf("[%s] %s: answered after %s (bound %s)", state, op, r.took, smBound)
	default:
		e.t.Logf("[%s] %-22s %d %6dms %s", state, op, r.status, r.took.Milliseconds(), firstLineOf(r.message))
	}
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// newSubject starts a conversation (with its named sandbox) and gives its
// kernel a variable.
func (e *smEnv) newSubject() *smSubject {
	e.t.Helper()
	c, err := e.d.c.CreateConversation(ctxT(e.t), api.CreateConversationRequest{Title: "state machine"})
	if err != nil {
		e.t.Fatalf("conversation: %v", err)
	}
	s := &smSubject{conv: c.ID, id: c.Sandbox, name: c.SandboxName}
	noError(e.t, runCode(e.t, e.d, s.id, py("kept = 41")))
	return s
}

// holdFile holds operation point at the subject (by id or name); the
// returned func releases it.
func (e *smEnv) holdFile(point, ref string) func() {
	e.t.Helper()
	f := filepath.Join(e.hold, point)
	if ref != "" {
		f += "@" + ref
	}
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return func() { os.Remove(f) }
}

func (e *smEnv) state(id string) api.SandboxState {
	sb, err := e.d.c.GetSandbox(ctxT(e.t), id)
	if err != nil {
		return api.SandboxState("unknown: " + err.Error())
	}
	return sb.State
}

// ensure puts the (stable-state) subject back into want after an operation
// moved it, or says it cannot (then the caller makes a new subject).
func (e *smEnv) ensure(s *smSubject, want api.SandboxState) bool {
	e.t.Helper()
	ctx := ctxT(e.t)
	for i := 0; i < 3; i++ {
		got := e.state(s.id)
		switch {
		case got == want:
			return true
		case want == api.StateRunning && got == api.StateSuspended:
			e.d.c.Resume(ctx, s.id)
		case want == api.StateSuspended && got == api.StateRunning:
			e.d.c.Suspend(ctx, s.id)
		case got == api.StateSuspending || got == api.StateResuming:
			time.Sleep(200 * time.Millisecond)
		default:
			return false
		}
	}
	return e.state(s.id) == want
}

// cleanup deletes every sandbox the operations made (fork branches, pool
// claims, new creates), keeping the pool's ready sandboxes.
func (e *smEnv) cleanup(keep ...string) {
	e.t.Helper()
	list, err := e.d.c.ListSandboxes(ctxT(e.t), client.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, sb := range list.Sandboxes {
		if sb.State == api.StateTerminated || sb.Labels["forkbox.pool.ready"] == "true" || contains(keep, sb.ID) {
			continue
		}
		e.deleteWithin(sb.ID, "cleanup")
	}
}

// deleteWithin deletes a sandbox and asserts the delete answers 2xx within
// the bound and leaves nothing behind.
func (e *smEnv) deleteWithin(id string, state api.SandboxState) {
	e.t.Helper()
	r := e.json("DELETE", "/v1/sandboxes/"+id, nil)
	if r.err != nil || r.status != 200 {
		e.t.Errorf("[%s] delete %s: %d %v %s (after %s)", state, id, r.status, r.err, r.message, r.took)
		return
	}
	e.t.Logf("[%s] %-22s %d %6dms", state, "delete "+id, r.status, r.took.Milliseconds())
	assertNoLeaks(e.t, e.d, id)
}

func TestStateMachine(t *testing.T) {
	needRoot(t)
	model := chattest.NewOpenAI(t)
	model.SetNext(func(n int, req map[string]any) chattest.Turn {
		if toolsSinceUser(req) == 0 {
			return chattest.Turn{Calls: scriptCall(fmt.Sprintf("c%d", n), "print('chat ok')")}
		}
		return chattest.Turn{Text: "done: " + lastToolText(req)}
	})
	hold := t.TempDir()
	d := startChatDaemon(t, "OPENAI_BASE_URL="+model.URL+"/v1", "OPENAI_API_KEY=test-key", "FORKBOX_MODEL=scripted",
		"FORKBOX_HOLD_DIR="+hold, "FORKBOX_LOCK_WAIT=2s")
	e := &smEnv{t: t, d: d, hold: hold, hc: &http.Client{Timeout: smBound + 30*time.Second}}
	cs, err := mcpHTTP(t, d, "")
	if err != nil {
		t.Fatal(err)
	}
	e.mcp = cs
	if _, err := d.c.CreatePool(ctxT(t), api.CreatePoolRequest{Name: "smpool", Image: "python", Size: 1}); err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, d, "smpool", 1)
	ops := smOps()

	// Stable states: each operation meets the subject in the state (it is
	// put back after an operation that moved it), one after another.
	stable := []struct {
		state api.SandboxState
		make  func(s *smSubject)
	}{
		{api.StateRunning, func(s *smSubject) {}},
		{api.StateSuspended, func(s *smSubject) {
			if _, err := d.c.Suspend(ctxT(t), s.id); err != nil {
				t.Fatal(err)
			}
		}},
		{api.StateError, func(s *smSubject) {
			// The sandbox's init dies under it, as it would if the host
			// killed it: the daemon marks it error.
			syscall.Kill(agentPID(t, s.id), syscall.SIGKILL)
			waitState(t, d, s.id, api.StateError, 30*time.Second)
		}},
		{api.StateTerminated, func(s *smSubject) {
			if _, err := d.c.DeleteSandbox(ctxT(t), s.id); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, st := range stable {
		t.Run(string(st.state), func(t *testing.T) {
			e.t = t
			s := e.newSubject()
			st.make(s)
			for _, op := range ops {
				if !e.ensure(s, st.state) {
					t.Logf("[%s] the subject is %s after the previous operation; a new one", st.state, e.state(s.id))
					e.deleteWithin(s.id, st.state)
					s = e.newSubject()
					st.make(s)
				}
				e.check(st.state, op.name, op.run(e, s))
			}
			e.deleteWithin(s.id, st.state)
			e.cleanup()
		})
	}

	// Transient states, held open at a hook: every operation runs at once
	// while the sandbox is there (the calls that need it wait at most the
	// lock-wait ceiling and answer busy), then a DELETE must win over the
	// held operation, and the held call itself must answer.
	transient := []struct {
		state api.SandboxState
		point string
		start func(s *smSubject) (ref string, call func() smResult)
	}{
		{api.StateCreating, "create:recorded", func(s *smSubject) (string, func() smResult) {
			return "", func() smResult {
				return e.json("POST", "/v1/conversations", api.CreateConversationRequest{Title: "held"})
			}
		}},
		{api.StateSuspending, "suspend:recorded", func(s *smSubject) (string, func() smResult) {
			return s.id, func() smResult { return e.json("POST", "/v1/sandboxes/"+s.id+"/suspend", nil) }
		}},
		// Its processes are gone, its record not yet suspended: a delete
		// here used to leave the suspend's cleanup a nil record (a panic).
		{api.StateSuspending, "suspend:freed", func(s *smSubject) (string, func() smResult) {
			return s.id, func() smResult { return e.json("POST", "/v1/sandboxes/"+s.id+"/suspend", nil) }
		}},
		{api.StateResuming, "resume:recorded", func(s *smSubject) (string, func() smResult) {
			if _, err := d.c.Suspend(ctxT(t), s.id); err != nil {
				t.Fatal(err)
			}
			return s.id, func() smResult { return e.json("POST", "/v1/sandboxes/"+s.id+"/resume", nil) }
		}},
	}
	for _, tr := range transient {
		t.Run(string(tr.state)+"@"+tr.point, func(t *testing.T) {
			e.t = t
			waitPoolReady(t, d, "smpool", 1) // no refill is under way
			s := &smSubject{}
			if tr.state != api.StateCreating {
				s = e.newSubject()
			}
			ref, call := tr.start(s)
			release := e.holdFile(tr.point, ref)
			defer release()
			held := make(chan smResult, 1)
			go func() { held <- call() }()
			// Wait for the subject to show the state.
			deadline := time.Now().Add(smBound)
			for {
				list, err := d.c.ListSandboxes(ctxT(t), client.ListOptions{State: tr.state})
				if err == nil && len(list.Sandboxes) == 1 {
					s.id, s.name = list.Sandboxes[0].ID, list.Sandboxes[0].Name
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no sandbox became %s: %+v %v", tr.state, list, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			var wg sync.WaitGroup
			for _, op := range ops {
				wg.Add(1)
				go func(op smOp) {
					defer wg.Done()
					e.check(tr.state, op.name, op.run(e, s))
				}(op)
			}
			wg.Wait()
			if got := e.state(s.id); got != tr.state {
				t.Errorf("the held subject left %s: %s", tr.state, got)
			}
			// The delete cancels the held operation and wins.
			e.deleteWithin(s.id, tr.state)
			select {
			case r := <-held:
				e.check(tr.state, "the held "+tr.point, r)
			case <-time.After(smBound):
				t.Errorf("[%s] the held %s did not answer after the delete", tr.state, tr.point)
			}
			release()
			e.cleanup()
		})
	}
	e.t = t
	t.Run("two deletes", func(t *testing.T) {
		e.t = t
		s := e.newSubject()
		release := e.holdFile("delete:locked", s.id)
		defer release()
		first := make(chan smResult, 1)
		go func() { first <- e.json("DELETE", "/v1/sandboxes/"+s.id, nil) }()
		reached := filepath.Join(hold, "delete:locked@"+s.id+".reached")
		for deadline := time.Now().Add(smBound); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(reached); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the first delete did not reach its hold")
			}
		}
		// The second delete must not cancel the first half way (it answered
		// 500 "context canceled"): it waits it out and finds it gone.
		second := make(chan smResult, 1)
		go func() { second <- e.json("DELETE", "/v1/sandboxes/"+s.id, nil) }()
		time.Sleep(300 * time.Millisecond)
		release()
		for i, ch := range []chan smResult{first, second} {
			r := <-ch
			if r.err != nil || r.status != 200 {
				t.Errorf("delete %d: %d %v %s", i+1, r.status, r.err, r.message)
			}
		}
		assertNoLeaks(t, d, s.id)
	})
	e.t = t
	// The daemon is healthy after all of it.
	if err := d.c.Health(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, d, api.CreateSandboxRequest{})
	if res := run(t, d, sb.ID, "echo", "ok"); res.Stdout != "ok\n" {
		t.Fatalf("after the state machine: %+v", res)
	}
}

// TestSuspendedCheckpointAndFork is the flow that used to panic: a named
// session, suspended, is checkpointed both ways and forked; the branches
// hold its variables, the source stays suspended, and every sandbox
// involved deletes within seconds.
func TestSuspendedCheckpointAndFork(t *testing.T) {
	needRoot(t)
	d := shared
	ctx := ctxT(t)
	src := newSandbox(t, d, api.CreateSandboxRequest{Name: "sleeper"})
	noError(t, runCode(t, d, src.ID, py("x = 42")))
	sh(t, d, src.ID, "echo on-disk > /workspace/f.txt")
	if _, err := d.c.Suspend(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	mem, err := d.c.Checkpoint(ctx, src.ID, api.CheckpointRequest{Type: api.SnapshotMemory, Name: "from-suspended"})
	if err != nil {
		t.Fatalf("memory checkpoint of a suspended sandbox: %v", err)
	}
	fs, err := d.c.Checkpoint(ctx, src.ID, api.CheckpointRequest{Type: api.SnapshotFilesystem})
	if err != nil {
		t.Fatalf("filesystem checkpoint of a suspended sandbox: %v", err)
	}
	if mem.SandboxID != src.ID || mem.Type != api.SnapshotMemory || fs.Type != api.SnapshotFilesystem || mem.SizeBytes <= fs.SizeBytes {
		t.Fatalf("snapshots: %+v %+v", mem, fs)
	}
	fork, err := d.c.Fork(ctx, src.ID, api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatalf("fork of a suspended sandbox: %v", err)
	}
	ids := []string{}
	for _, b := range fork.Sandboxes {
		ids = append(ids, b.ID)
		if got := mainResult(t, runCode(t, d, b.ID, py("x"))); got != "42" {
			t.Fatalf("branch %s: x = %s", b.ID, got)
		}
	}
	if got, err := d.c.GetSandbox(ctx, src.ID); err != nil || got.State != api.StateSuspended {
		t.Fatalf("the source after checkpoints and a fork: %+v %v", got, err)
	}
	// The memory snapshot restores with the variables; the filesystem one
	// with the files and a fresh kernel.
	fromMem := newSandbox(t, d, api.CreateSandboxRequest{SnapshotID: mem.ID})
	if got := mainResult(t, runCode(t, d, fromMem.ID, py("x + 1"))); got != "43" {
		t.Fatalf("restored from the memory snapshot: %s", got)
	}
	fromFS := newSandbox(t, d, api.CreateSandboxRequest{SnapshotID: fs.ID})
	if res := sh(t, d, fromFS.ID, "cat /workspace/f.txt"); res.Stdout != "on-disk\n" {
		t.Fatalf("restored from the filesystem snapshot: %+v", res)
	}
	// The source resumes as it was.
	if got := mainResult(t, runCode(t, d, src.ID, py("x"))); got != "42" {
		t.Fatalf("source after resume: %s", got)
	}
	for _, id := range append(ids, src.ID, fromMem.ID, fromFS.ID) {
		start := time.Now()
		if _, err := d.c.DeleteSandbox(ctx, id); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("delete %s took %s", id, took)
		}
		assertNoLeaks(t, d, id)
	}
}

// TestPanicMidOperation makes the daemon panic in the middle of a
// checkpoint (sandbox frozen), a suspend (image written, processes not yet
// freed), a resume (processes restored, not yet recorded) and a create
// (processes started, not yet recorded). Each answers 500 with a request id
// that names the logged stack; the daemon lives on; the sandbox is thawed
// and usable, or suspended with its state, or in error with nothing left;
// no temp dir or snapshot files remain; and every sandbox deletes.
func TestPanicMidOperation(t *testing.T) {
	needRoot(t)
	d, err := startDaemon(filepath.Join(t.TempDir(), "panicky"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })
	restartWith := func(fault string) {
		t.Helper()
		d.env = nil
		if fault != "" {
			d.env = []string{"FORKBOX_FAULT=" + fault}
		}
		d.stop()
		if err := d.start(); err != nil {
			t.Fatal(err)
		}
	}
	want500 := func(t *testing.T, method, path string, body any) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, "http://"+d.addr+path, bytes.NewReader(b))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: no answer: %v", method, path, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb api.Error
		json.Unmarshal(raw, &eb)
		rid := resp.Header.Get("X-Request-Id")
		if resp.StatusCode != 500 || eb.Error.Code != "internal" || rid == "" || eb.Error.RequestID != rid ||
			!strings.Contains(eb.Error.Message, rid) {
			t.Fatalf("%s %s: %d %s (X-Request-Id %q)", method, path, resp.StatusCode, raw, rid)
		}
		// The whole log: a panic's line carries its stack, longer than a
		// tail.
		whole, _ := os.ReadFile(d.log.Name())
		if !slices.ContainsFunc(strings.Split(string(whole), "\n"), func(line string) bool {
			return strings.Contains(line, rid) && strings.Contains(line, "panic")
		}) {
			t.Fatalf("the log does not name request %s with its panic:\n%s", rid, d.logTail())
		}
	}
	noTemp := func(t *testing.T) {
		t.Helper()
		ents, _ := os.ReadDir(filepath.Join(d.dataDir, "snapshots"))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				t.Errorf("temp snapshot dir left: %s", e.Name())
			}
		}
	}
	snapCount := func(t *testing.T) int {
		dirs, _ := filepath.Glob(filepath.Join(d.dataDir, "snapshots", "snap_*"))
		return len(dirs)
	}

	t.Run("checkpoint", func(t *testing.T) {
		restartWith("checkpoint:frozen=panic")
		sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "panic-ckpt"})
		noError(t, runCode(t, d, sb.ID, py("v = 7")))
		before := snapCount(t)
		want500(t, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", api.CheckpointRequest{Type: api.SnapshotMemory})
		noTemp(t)
		if n := snapCount(t); n != before {
			t.Errorf("%d snapshot dirs after a failed checkpoint, %d before", n, before)
		}
		// Thawed, its lock and gate free: it answers, a filesystem
		// checkpoint is refused by the same fault (its lock was released),
		// and without the fault a memory checkpoint works.
		if got := mainResult(t, runCode(t, d, sb.ID, py("v"))); got != "7" {
			t.Fatalf("after the panic: v = %s", got)
		}
		want500(t, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", api.CheckpointRequest{Type: api.SnapshotFilesystem})
		restartWith("")
		if _, err := d.c.Checkpoint(ctxT(t), sb.ID, api.CheckpointRequest{Type: api.SnapshotMemory}); err != nil {
			t.Fatalf("checkpoint after the panic: %v", err)
		}
		if _, err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
			t.Fatal(err)
		}
		assertNoLeaks(t, d, sb.ID)
	})
	t.Run("suspend", func(t *testing.T) {
		restartWith("suspend:imaged=panic")
		sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "panic-suspend"})
		noError(t, runCode(t, d, sb.ID, py("v = 8")))
		before := snapCount(t)
		want500(t, "POST", "/v1/sandboxes/"+sb.ID+"/suspend", nil)
		noTemp(t)
		if got, _ := d.c.GetSandbox(ctxT(t), sb.ID); got.State != api.StateRunning {
			t.Fatalf("after a panic before its processes were freed the sandbox is %s", got.State)
		}
		if got := mainResult(t, runCode(t, d, sb.ID, py("v"))); got != "8" {
			t.Fatalf("after the panic: v = %s", got)
		}
		if sn, _ := d.c.ListSnapshots(ctxT(t), sb.ID); len(sn.Snapshots) != 0 {
			t.Errorf("snapshots after a failed suspend: %+v", sn)
		}
		if n := snapCount(t); n != before {
			t.Errorf("the failed suspend's image is left on disk (%d snapshot dirs)", n)
		}
		if _, err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
			t.Fatal(err)
		}
		assertNoLeaks(t, d, sb.ID)
	})
	t.Run("resume", func(t *testing.T) {
		restartWith("")
		sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "panic-resume"})
		noError(t, runCode(t, d, sb.ID, py("v = 9")))
		if _, err := d.c.Suspend(ctxT(t), sb.ID); err != nil {
			t.Fatal(err)
		}
		restartWith("resume:restored=panic")
		want500(t, "POST", "/v1/sandboxes/"+sb.ID+"/resume", nil)
		got, _ := d.c.GetSandbox(ctxT(t), sb.ID)
		if got.State != api.StateSuspended || processesOf(sb.ID) != 0 {
			t.Fatalf("after a panic mid-resume: %s with %d processes", got.State, processesOf(sb.ID))
		}
		restartWith("")
		if got := mainResult(t, runCode(t, d, sb.ID, py("v"))); got != "9" {
			t.Fatalf("resumed after the panic: v = %s", got)
		}
		if _, err := d.c.DeleteSandbox(ctxT(t), sb.ID); err != nil {
			t.Fatal(err)
		}
		assertNoLeaks(t, d, sb.ID)
	})
	t.Run("create", func(t *testing.T) {
		restartWith("create:started=panic")
		want500(t, "POST", "/v1/sandboxes", api.CreateSandboxRequest{Name: "panic-create"})
		list, _ := d.c.ListSandboxes(ctxT(t), client.ListOptions{Name: "panic-create"})
		if len(list.Sandboxes) != 1 || list.Sandboxes[0].State != api.StateError {
			t.Fatalf("after a panic mid-create: %+v", list)
		}
		id := list.Sandboxes[0].ID
		assertNoLeaks(t, d, id)
		restartWith("")
		if _, err := d.c.DeleteSandbox(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
		// The name is free again.
		sb := newSandbox(t, d, api.CreateSandboxRequest{Name: "panic-create"})
		run(t, d, sb.ID, "true")
	})
}
