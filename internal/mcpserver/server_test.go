package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

// names lists every tool.
var names = []string{"create_sandbox", "list_sandboxes", "terminate_sandbox", "run_code", "run_command",
	"read_file", "write_file", "checkpoint", "fork", "suspend", "resume", "list_snapshots"}

// pngMagic starts every PNG file.
var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// fakeBackend is an in-memory forkbox: one map of sandboxes with files, and
// scripted cells.
type fakeBackend struct {
	mu    sync.Mutex
	sbs   map[string]*api.Sandbox
	files map[string][]byte // sandbox/path
	modes map[string]os.FileMode
	execs []api.ExecRequest
	code  []api.RunCodeRequest
	snaps []api.Snapshot
}

func newFake() *fakeBackend {
	return &fakeBackend{sbs: map[string]*api.Sandbox{}, files: map[string][]byte{}, modes: map[string]os.FileMode{}}
}

func notFound(sb string) error {
	return &client.APIError{Status: 404, Code: "not_found", Message: fmt.Sprintf("sandbox %q not found", sb)}
}

func (f *fakeBackend) get(sb string) (*api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.sbs[sb]; ok {
		return s, nil
	}
	for _, s := range f.sbs {
		if s.Name != "" && s.Name == sb {
			return s, nil
		}
	}
	return nil, notFound(sb)
}

func (f *fakeBackend) CreateSandbox(_ context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := fmt.Sprintf("sb_%d", len(f.sbs)+1)
	sb := &api.Sandbox{ID: id, Name: req.Name, State: api.StateRunning, Image: "python", Labels: req.Labels, Env: req.Env}
	if req.CPUs != nil {
		sb.CPUs = *req.CPUs
	}
	f.sbs[id] = sb
	return sb, nil
}

func (f *fakeBackend) ListSandboxes(_ context.Context, opts client.ListOptions) (*api.SandboxList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &api.SandboxList{}
	for _, sb := range f.sbs {
		// As the daemon: terminated ones only when asked for.
		if sb.State == api.StateTerminated && opts.State == "" && !opts.IncludeTerminated {
			continue
		}
		if opts.State == "" || opts.State == sb.State {
			out.Sandboxes = append(out.Sandboxes, *sb)
		}
	}
	slices.SortFunc(out.Sandboxes, func(a, b api.Sandbox) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (f *fakeBackend) DeleteSandbox(_ context.Context, sb string) (*api.Sandbox, error) {
	s, err := f.get(sb)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	s.State = api.StateTerminated
	f.mu.Unlock()
	return s, nil
}

func (f *fakeBackend) RunCode(_ context.Context, sb string, req api.RunCodeRequest) (*api.Execution, error) {
	if _, err := f.get(sb); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.code = append(f.code, req)
	f.mu.Unlock()
	ex := &api.Execution{Logs: api.Logs{Stdout: []string{}, Stderr: []string{}}, Results: []map[string]any{}, ExecutionCount: 1}
	switch req.Code {
	case "chart":
		png := append(append([]byte{}, pngMagic...), "data"...)
		ex.Logs.Stdout = []string{"drawing\n"}
		ex.Results = append(ex.Results,
			map[string]any{"text": "<Figure size 640x480 with 1 Axes>", "png": base64.StdEncoding.EncodeToString(png)},
			map[string]any{"is_main_result": true, "text": "[<matplotlib.lines.Line2D at 0x7f>]"})
	case "boom":
		ex.Logs.Stdout = []string{"before\n"}
		ex.Error = &api.ExecutionError{Name: "ValueError", Value: "bad value 7", Traceback: []string{"Traceback (most recent call last):", "  File \"<cell>\", line 2, in check", "ValueError: bad value 7"}}
	case "quiet":
	case "table":
		ex.Results = append(ex.Results, map[string]any{"is_main_result": true, "text": "   a\n0  1", "html": "<table></table>"},
			map[string]any{"markdown": "**bold**"})
	default:
		ex.Logs.Stderr = []string{"warn\n"}
		ex.Results = append(ex.Results, map[string]any{"is_main_result": true, "text": "215"})
	}
	return ex, nil
}

func (f *fakeBackend) Exec(_ context.Context, sb string, req api.ExecRequest) (*api.ExecResult, error) {
	if _, err := f.get(sb); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.execs = append(f.execs, req)
	f.mu.Unlock()
	if strings.Contains(req.Args[1], "fail") {
		return &api.ExecResult{Stderr: "no such file\n", ExitCode: 2}, nil
	}
	return &api.ExecResult{Stdout: "hello\n", ExitCode: 0, DurationMS: 3}, nil
}

func (f *fakeBackend) ReadFileTo(_ context.Context, sb, path string, w io.Writer) (int64, error) {
	if _, err := f.get(sb); err != nil {
		return 0, err
	}
	f.mu.Lock()
	data, ok := f.files[sb+"/"+path]
	f.mu.Unlock()
	if !ok {
		return 0, &client.APIError{Status: 404, Code: "not_found", Message: "no such file: " + path}
	}
	// Write in small pieces, as a download would.
	var n int64
	for len(data) > 0 {
		k := min(len(data), 7)
		m, err := w.Write(data[:k])
		n += int64(m)
		if err != nil {
			return n, fmt.Errorf("reading %s from sandbox %s: %w", path, sb, err)
		}
		data = data[k:]
	}
	return n, nil
}

func (f *fakeBackend) WriteFile(_ context.Context, sb, path string, r io.Reader, mode os.FileMode) (*api.WriteFileResult, error) {
	if _, err := f.get(sb); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.files[sb+"/"+path] = data
	f.modes[sb+"/"+path] = mode
	f.mu.Unlock()
	return &api.WriteFileResult{Path: "/workspace/" + path, Size: int64(len(data))}, nil
}

func (f *fakeBackend) Checkpoint(_ context.Context, sb string, req api.CheckpointRequest) (*api.Snapshot, error) {
	s, err := f.get(sb)
	if err != nil {
		return nil, err
	}
	typ := req.Type
	if typ == "" {
		typ = api.SnapshotFilesystem
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sn := api.Snapshot{ID: fmt.Sprintf("snap_%d", len(f.snaps)+1), Type: typ, Name: req.Name, SandboxID: s.ID}
	f.snaps = append(f.snaps, sn)
	return &sn, nil
}

func (f *fakeBackend) Fork(ctx context.Context, sb string, req api.ForkRequest) (*api.ForkResult, error) {
	sn, err := f.Checkpoint(ctx, sb, api.CheckpointRequest{Type: api.SnapshotMemory})
	if err != nil {
		return nil, err
	}
	res := &api.ForkResult{Snapshot: *sn}
	for i := range req.Count {
		name := ""
		if i < len(req.Names) {
			name = req.Names[i]
		}
		s, _ := f.CreateSandbox(ctx, api.CreateSandboxRequest{Name: name, SnapshotID: sn.ID})
		res.Sandboxes = append(res.Sandboxes, *s)
	}
	return res, nil
}

func (f *fakeBackend) setState(sb string, from, to api.SandboxState) (*api.Sandbox, error) {
	s, err := f.get(sb)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.State != from {
		return nil, &client.APIError{Status: 409, Code: "failed_precondition", Message: fmt.Sprintf("sandbox %s is %s, not %s", s.ID, s.State, from)}
	}
	s.State = to
	return s, nil
}

func (f *fakeBackend) Suspend(_ context.Context, sb string) (*api.Sandbox, error) {
	return f.setState(sb, api.StateRunning, api.StateSuspended)
}

func (f *fakeBackend) Resume(_ context.Context, sb string) (*api.Sandbox, error) {
	return f.setState(sb, api.StateSuspended, api.StateRunning)
}

func (f *fakeBackend) ListSnapshots(_ context.Context, sb string) (*api.SnapshotList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &api.SnapshotList{}
	for _, sn := range f.snaps {
		if sb == "" || sn.SandboxID == sb || f.sbs[sn.SandboxID].Name == sb {
			out.Snapshots = append(out.Snapshots, sn)
		}
	}
	return out, nil
}

// connect runs New(b) on an in-memory transport and returns a client
// session of the official SDK's client on it.
func connect(t *testing.T, b Backend, opts *Options) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(b, opts).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	return res
}

// texts joins the text contents of res.
func texts(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func images(res *mcp.CallToolResult) []*mcp.ImageContent {
	var out []*mcp.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			out = append(out, ic)
		}
	}
	return out
}

// structured decodes res's structured content into v.
func structured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

func TestListToolsAndSchemas(t *testing.T) {
	cs := connect(t, newFake(), nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		got[tool.Name] = tool
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
	}
	if len(got) != len(names) {
		t.Errorf("got %d tools, want %d", len(got), len(names))
	}
	for _, n := range names {
		if got[n] == nil {
			t.Errorf("tool %s missing", n)
		}
	}
	schema := func(name string) map[string]any {
		b, _ := json.Marshal(got[name].InputSchema)
		var m map[string]any
		json.Unmarshal(b, &m)
		return m
	}
	required := func(name string) []string {
		var out []string
		for _, r := range schema(name)["required"].([]any) {
			out = append(out, r.(string))
		}
		slices.Sort(out)
		return out
	}
	for name, want := range map[string][]string{
		"run_code":          {"code", "sandbox"},
		"run_command":       {"command", "sandbox"},
		"read_file":         {"path", "sandbox"},
		"write_file":        {"content", "path", "sandbox"},
		"terminate_sandbox": {"sandbox"},
		"fork":              {"sandbox"},
	} {
		if r := required(name); !slices.Equal(r, want) {
			t.Errorf("%s required %v, want %v", name, r, want)
		}
	}
	props := schema("checkpoint")["properties"].(map[string]any)
	if enum := props["type"].(map[string]any)["enum"]; fmt.Sprint(enum) != "[filesystem memory]" {
		t.Errorf("checkpoint type enum %v", enum)
	}
	if d := props["sandbox"].(map[string]any)["description"]; d == nil || !strings.Contains(d.(string), "id") {
		t.Errorf("sandbox property has description %v", d)
	}
	if s := schema("create_sandbox"); s["required"] != nil && len(s["required"].([]any)) != 0 {
		t.Errorf("create_sandbox requires %v", s["required"])
	}
	if !got["list_sandboxes"].Annotations.ReadOnlyHint || !got["read_file"].Annotations.ReadOnlyHint {
		t.Error("list tools are not read-only")
	}
}

func TestRunCodeContent(t *testing.T) {
	f := newFake()
	cs := connect(t, f, nil)
	sb, _ := f.CreateSandbox(context.Background(), api.CreateSandboxRequest{})

	res := call(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "sum(sales)", "timeout_secs": 2.5})
	if res.IsError || !strings.Contains(texts(res), "[result]\n215") || !strings.Contains(texts(res), "[stderr]\nwarn") {
		t.Fatalf("sum: error %v, content %q", res.IsError, texts(res))
	}
	var sum codeSummary
	structured(t, res, &sum)
	if sum.Text != "215" || sum.ExecutionCount != 1 || sum.Stderr != "warn\n" {
		t.Errorf("structured %+v", sum)
	}
	if tm := f.code[0].TimeoutMS; tm == nil || *tm != 2500 {
		t.Errorf("timeout_ms %v, want 2500", tm)
	}

	res = call(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "chart"})
	imgs := images(res)
	if res.IsError || len(imgs) != 1 || imgs[0].MIMEType != "image/png" || !bytes.HasPrefix(imgs[0].Data, pngMagic) {
		t.Fatalf("chart: error %v, %d images, content %+v", res.IsError, len(imgs), res.Content)
	}
	if txt := texts(res); strings.Contains(txt, "<Figure") || !strings.Contains(txt, "[stdout]\ndrawing") || !strings.Contains(txt, "Line2D") {
		t.Errorf("chart text %q", txt)
	}
	structured(t, res, &sum)
	if sum.Images != 1 {
		t.Errorf("structured images %d", sum.Images)
	}

	res = call(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "boom"})
	if txt := texts(res); !res.IsError || !strings.Contains(txt, "[error] ValueError: bad value 7") ||
		!strings.Contains(txt, "line 2, in check") || !strings.Contains(txt, "[stdout]\nbefore") {
		t.Fatalf("boom: error %v, content %q", res.IsError, txt)
	}

	res = call(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "quiet"})
	if res.IsError || texts(res) != "(no output)" {
		t.Errorf("quiet: %q", texts(res))
	}
	res = call(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "table"})
	if txt := texts(res); !strings.Contains(txt, "[result]\n   a\n0  1") || !strings.Contains(txt, "[display markdown]\n**bold**") {
		t.Errorf("table: %q", txt)
	}
}

func TestToolErrors(t *testing.T) {
	cs := connect(t, newFake(), nil)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"run_code", map[string]any{"sandbox": "nope", "code": "1"}, `not_found: sandbox "nope" not found`},
		{"terminate_sandbox", map[string]any{"sandbox": "nope"}, `not_found: sandbox "nope" not found`},
		{"run_code", map[string]any{"code": "1"}, "sandbox"},                                 // schema: required
		{"run_code", map[string]any{"sandbox": "x", "code": "1", "bogus": 1}, "bogus"},       // schema: unknown
		{"checkpoint", map[string]any{"sandbox": "x", "type": "disk"}, "type"},               // schema: enum
		{"fork", map[string]any{"sandbox": "x", "count": 99}, "count"},                       // schema: maximum
		{"run_command", map[string]any{"sandbox": "x", "command": "  "}, "command is empty"}, // handler check
		{"write_file", map[string]any{"sandbox": "x", "path": "a", "content": "zz", "mode": "9"}, "mode"},
		{"run_code", map[string]any{"sandbox": " ", "code": "1"}, "sandbox is required"},
	} {
		res := call(t, cs, tc.tool, tc.args)
		if !res.IsError || !strings.Contains(texts(res), tc.want) {
			t.Errorf("%s %v: IsError %v, content %q, want it to mention %q", tc.tool, tc.args, res.IsError, texts(res), tc.want)
		}
	}
}

func TestLifecycleTools(t *testing.T) {
	f := newFake()
	cs := connect(t, f, nil)
	res := call(t, cs, "create_sandbox", map[string]any{"name": "analysis", "cpus": 0.5, "labels": map[string]any{"team": "a"}})
	var sb api.Sandbox
	structured(t, res, &sb)
	if res.IsError || sb.ID == "" || sb.Name != "analysis" || sb.CPUs != 0.5 || !strings.Contains(texts(res), sb.ID) {
		t.Fatalf("create: %v %+v %q", res.IsError, sb, texts(res))
	}
	other, _ := f.CreateSandbox(context.Background(), api.CreateSandboxRequest{})
	f.DeleteSandbox(context.Background(), other.ID)

	var list api.SandboxList
	structured(t, call(t, cs, "list_sandboxes", nil), &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Errorf("list hides terminated: %+v", list)
	}
	structured(t, call(t, cs, "list_sandboxes", map[string]any{"include_terminated": true}), &list)
	if len(list.Sandboxes) != 2 {
		t.Errorf("list with terminated: %+v", list)
	}

	res = call(t, cs, "run_command", map[string]any{"sandbox": "analysis", "command": "echo hello | cat", "timeout_secs": 5, "cwd": "/tmp"})
	if res.IsError || texts(res) != "exit_code: 0\n[stdout]\nhello\n" {
		t.Errorf("run_command: %v %q", res.IsError, texts(res))
	}
	if e := f.execs[0]; e.Cmd != "/bin/sh" || !slices.Equal(e.Args, []string{"-c", "echo hello | cat"}) || e.Cwd != "/tmp" || *e.TimeoutSecs != 5 {
		t.Errorf("exec request %+v", e)
	}
	res = call(t, cs, "run_command", map[string]any{"sandbox": "analysis", "command": "cat fail"})
	if res.IsError || texts(res) != "exit_code: 2\n[stderr]\nno such file\n" {
		t.Errorf("failing command: %v %q", res.IsError, texts(res))
	}

	var sn api.Snapshot
	res = call(t, cs, "checkpoint", map[string]any{"sandbox": "analysis", "type": "memory", "name": "before"})
	structured(t, res, &sn)
	if res.IsError || sn.Type != "memory" || sn.Name != "before" {
		t.Errorf("checkpoint: %q", texts(res))
	}
	var fr api.ForkResult
	structured(t, call(t, cs, "fork", map[string]any{"sandbox": "analysis", "names": []string{"l", "r"}}), &fr)
	if len(fr.Sandboxes) != 2 || fr.Sandboxes[1].Name != "r" {
		t.Errorf("fork: %+v", fr)
	}
	var snaps api.SnapshotList
	structured(t, call(t, cs, "list_snapshots", map[string]any{"sandbox": "analysis"}), &snaps)
	if len(snaps.Snapshots) != 2 {
		t.Errorf("snapshots: %+v", snaps)
	}
	structured(t, call(t, cs, "list_snapshots", map[string]any{"sandbox": "nothing"}), &snaps)
	if snaps.Snapshots == nil || len(snaps.Snapshots) != 0 {
		t.Errorf("no snapshots: %+v", snaps)
	}

	structured(t, call(t, cs, "suspend", map[string]any{"sandbox": "analysis"}), &sb)
	if sb.State != api.StateSuspended {
		t.Errorf("suspend: %+v", sb)
	}
	if res := call(t, cs, "suspend", map[string]any{"sandbox": "analysis"}); !res.IsError || !strings.Contains(texts(res), "failed_precondition: sandbox") {
		t.Errorf("second suspend: %v %q", res.IsError, texts(res))
	}
	structured(t, call(t, cs, "resume", map[string]any{"sandbox": "analysis"}), &sb)
	if sb.State != api.StateRunning {
		t.Errorf("resume: %+v", sb)
	}
	structured(t, call(t, cs, "terminate_sandbox", map[string]any{"sandbox": "analysis"}), &sb)
	if sb.State != api.StateTerminated {
		t.Errorf("terminate: %+v", sb)
	}
}

func TestFileTools(t *testing.T) {
	f := newFake()
	cs := connect(t, f, &Options{MaxReadBytes: 32})
	sb, _ := f.CreateSandbox(context.Background(), api.CreateSandboxRequest{})

	res := call(t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": "notes.txt", "content": "héllo\nworld\n"})
	var wr api.WriteFileResult
	structured(t, res, &wr)
	if res.IsError || wr.Size != int64(len("héllo\nworld\n")) || f.modes[sb.ID+"/notes.txt"] != 0 {
		t.Fatalf("write: %v %q", res.IsError, texts(res))
	}
	if res := call(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "notes.txt"}); res.IsError || texts(res) != "héllo\nworld\n" {
		t.Errorf("read text: %v %q", res.IsError, texts(res))
	}

	png := append(append([]byte{}, pngMagic...), "\x00\x00\x00\rIHDR"...)
	res = call(t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": "chart.png", "content": base64.StdEncoding.EncodeToString(png), "encoding": "base64", "mode": "0600"})
	if res.IsError || !bytes.Equal(f.files[sb.ID+"/chart.png"], png) || f.modes[sb.ID+"/chart.png"] != 0o600 {
		t.Fatalf("write base64: %v %q", res.IsError, texts(res))
	}
	res = call(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "chart.png"})
	if imgs := images(res); res.IsError || len(imgs) != 1 || imgs[0].MIMEType != "image/png" || !bytes.Equal(imgs[0].Data, png) {
		t.Errorf("read png: %v %+v", res.IsError, res.Content)
	}
	res = call(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "chart.png", "base64": true})
	if !strings.Contains(texts(res), base64.StdEncoding.EncodeToString(png)) {
		t.Errorf("read png as base64: %q", texts(res))
	}

	f.files[sb.ID+"/blob"] = []byte{0xff, 0xfe, 0, 1}
	if txt := texts(call(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "blob"})); !strings.Contains(txt, "binary") || !strings.Contains(txt, "//4AAQ==") {
		t.Errorf("read binary: %q", txt)
	}

	// Longer than the 32-byte default: cut, without half a rune.
	f.files[sb.ID+"/long"] = []byte(strings.Repeat("a", 31) + "é" + strings.Repeat("b", 100))
	txt := texts(call(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "long"}))
	if !strings.HasPrefix(txt, strings.Repeat("a", 31)+"\n[truncated: only the first 32 bytes") {
		t.Errorf("truncated read: %q", txt)
	}
	if txt := texts(call(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "long", "max_bytes": 1000})); strings.Contains(txt, "truncated") || len(txt) != 133 {
		t.Errorf("read with max_bytes: %q", txt)
	}
	f.files[sb.ID+"/big.png"] = append(append([]byte{}, png...), make([]byte, 64)...)
	if res := call(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "big.png"}); !res.IsError || !strings.Contains(texts(res), "image larger than") {
		t.Errorf("big image: %v %q", res.IsError, texts(res))
	}
	if res := call(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "missing"}); !res.IsError || texts(res) != "not_found: no such file: missing" {
		t.Errorf("missing file: %v %q", res.IsError, texts(res))
	}
	if res := call(t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": "x", "content": "!!", "encoding": "base64"}); !res.IsError || !strings.Contains(texts(res), "not valid base64") {
		t.Errorf("bad base64: %v %q", res.IsError, texts(res))
	}
}

// fakeAPI serves a few routes of the forkbox HTTP API, enough to check the
// in-process client and the /mcp endpoint.
func fakeAPI(t *testing.T, started chan<- struct{}, cancelled chan<- struct{}) http.Handler {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateSandboxRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeJSON(w, 400, api.Error{Error: api.ErrorBody{Code: "invalid_argument", Message: err.Error()}})
			return
		}
		writeJSON(w, 201, api.Sandbox{ID: "sb_1", Name: req.Name, State: api.StateRunning})
	})
	mux.HandleFunc("POST /v1/sandboxes/{sandbox}/code", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("sandbox") != "sb_1" {
			writeJSON(w, 404, api.Error{Error: api.ErrorBody{Code: "not_found", Message: fmt.Sprintf("sandbox %q not found", r.PathValue("sandbox"))}})
			return
		}
		png := base64.StdEncoding.EncodeToString(append(append([]byte{}, pngMagic...), 1, 2, 3))
		writeJSON(w, 200, api.Execution{Logs: api.Logs{Stdout: []string{"hi\n"}}, Results: []map[string]any{{"png": png, "text": "<Figure>"}}})
	})
	mux.HandleFunc("GET /v1/sandboxes/{sandbox}/files", func(w http.ResponseWriter, r *http.Request) {
		// An endless file: the reader must be able to stop early.
		w.Header().Set("Content-Type", "application/octet-stream")
		if started != nil {
			close(started)
		}
		chunk := bytes.Repeat([]byte("x"), 4096)
		for {
			if _, err := w.Write(chunk); err != nil {
				break
			}
			if r.Context().Err() != nil {
				break
			}
		}
		if cancelled != nil {
			close(cancelled)
		}
	})
	mux.HandleFunc("GET /v1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		panic("boom")
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{sandbox}", func(w http.ResponseWriter, r *http.Request) {
		// Writes nothing: an empty 200.
	})
	return mux
}

func TestInProcessClient(t *testing.T) {
	started, cancelled := make(chan struct{}), make(chan struct{})
	c := InProcess(fakeAPI(t, started, cancelled))
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "n"})
	if err != nil || sb.ID != "sb_1" || sb.Name != "n" {
		t.Fatalf("create: %+v %v", sb, err)
	}
	_, err = c.RunCode(ctx, "nope", api.RunCodeRequest{Code: "1"})
	if ae, ok := err.(*client.APIError); !ok || ae.Status != 404 || ae.Code != "not_found" || ae.Message != `sandbox "nope" not found` {
		t.Fatalf("unknown sandbox: %#v", err)
	}
	// Reading stops at the limit and the handler sees its request end.
	w := &limitWriter{n: 10000}
	_, err = c.ReadFileTo(ctx, "sb_1", "f", w)
	if !strings.Contains(fmt.Sprint(err), errLimit.Error()) || w.buf.Len() != 10000 {
		t.Fatalf("limited read: %d bytes, %v", w.buf.Len(), err)
	}
	<-started
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not stop after the reader went away")
	}
	if _, err := c.ListSnapshots(ctx, ""); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("panicking handler: %v", err)
	}
	// An empty 200 answer decodes to an error (no JSON), not a hang.
	if _, err := c.DeleteSandbox(ctx, "sb_1"); err == nil {
		t.Errorf("empty answer decoded")
	}
	// A cancelled context ends the call.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.CreateSandbox(cctx, api.CreateSandboxRequest{}); err == nil {
		t.Errorf("cancelled call succeeded")
	}
}

// TestHTTPEndpoint serves Handler over a fake API on a real HTTP server and
// talks to it with the SDK's streamable client, as the daemon's /mcp does.
func TestHTTPEndpoint(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/mcp", Handler(fakeAPI(t, nil, nil)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != len(names) {
		t.Fatalf("list tools: %v (%d tools)", err, len(tools.Tools))
	}
	res := call(t, cs, "create_sandbox", map[string]any{"name": "web"})
	if res.IsError || !strings.Contains(texts(res), `"sb_1"`) {
		t.Fatalf("create: %q", texts(res))
	}
	res = call(t, cs, "run_code", map[string]any{"sandbox": "sb_1", "code": "plot"})
	if imgs := images(res); res.IsError || len(imgs) != 1 || !bytes.HasPrefix(imgs[0].Data, pngMagic) || !strings.Contains(texts(res), "hi") {
		t.Fatalf("run_code: %v %+v", res.IsError, res.Content)
	}
	res = call(t, cs, "run_code", map[string]any{"sandbox": "nope", "code": "1"})
	if !res.IsError || texts(res) != `not_found: sandbox "nope" not found` {
		t.Fatalf("unknown sandbox: %v %q", res.IsError, texts(res))
	}
	// Concurrent calls from one session.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"sandbox": "sb_1", "code": "x"}})
			if err != nil || res.IsError {
				t.Errorf("concurrent run_code: %v %v", err, res)
			}
		})
	}
	wg.Wait()
}

func TestToolErrorUnreachable(t *testing.T) {
	cs := connect(t, client.New("http://127.0.0.1:1"), nil)
	res := call(t, cs, "list_sandboxes", nil)
	if !res.IsError || !strings.Contains(texts(res), "cannot reach the forkbox daemon") {
		t.Fatalf("unreachable: %v %q", res.IsError, texts(res))
	}
}
