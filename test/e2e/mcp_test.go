package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

// The MCP server is tested with the official Go MCP SDK's client, over both
// transports: `forkbox mcp` as a subprocess speaking stdio, and the daemon's
// streamable-HTTP endpoint /mcp.

var mcpToolNames = []string{"create_sandbox", "list_sandboxes", "terminate_sandbox", "run_code", "run_command",
	"read_file", "write_file", "checkpoint", "fork", "suspend", "resume", "list_snapshots"}

// mcpStdio starts `forkbox mcp --url <d>` and connects an MCP client to it.
func mcpStdio(t *testing.T, d *daemon, env ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(binary, "mcp", "--url", "http://"+d.addr)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "forkbox-e2e", Version: "1"}, nil).
		Connect(ctxT(t), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to forkbox mcp: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Errorf("closing the stdio session: %v\nstderr:\n%s", err, stderr.String())
		}
	})
	return cs
}

// bearer adds an API key to every request.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpHTTP connects an MCP client to the daemon's /mcp endpoint.
func mcpHTTP(t *testing.T, d *daemon, key string) (*mcp.ClientSession, error) {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: "http://" + d.addr + "/mcp", MaxRetries: -1}
	if key != "" {
		tr.HTTPClient = &http.Client{Transport: bearer{key}}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "forkbox-e2e", Version: "1"}, nil).Connect(ctxT(t), tr, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { cs.Close() })
	return cs, nil
}

func mcpCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error: %v", tool, args, err)
	}
	return res
}

// mcpOK calls a tool that must succeed.
func mcpOK(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res := mcpCall(t, cs, tool, args)
	if res.IsError {
		t.Fatalf("%s %v: tool error: %s", tool, args, mcpText(res))
	}
	return res
}

func mcpText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func mcpImages(res *mcp.CallToolResult) []*mcp.ImageContent {
	var out []*mcp.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			out = append(out, ic)
		}
	}
	return out
}

func mcpStructured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

func TestMCPStdio(t *testing.T) {
	needRoot(t)
	mcpFlow(t, mcpStdio(t, shared), "stdio")
}

func TestMCPHTTP(t *testing.T) {
	needRoot(t)
	cs, err := mcpHTTP(t, shared, "")
	if err != nil {
		t.Fatalf("connect to /mcp: %v\ndaemon log:\n%s", err, shared.logTail())
	}
	mcpFlow(t, cs, "http")
}

// mcpFlow is an agent's session: tools, a sandbox, state across cells, a
// chart, commands, files, a checkpoint, and errors.
func mcpFlow(t *testing.T, cs *mcp.ClientSession, transport string) {
	tools, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, tool := range tools.Tools {
		have[tool.Name] = true
		if tool.InputSchema == nil || tool.Description == "" {
			t.Errorf("tool %s lacks a schema or description", tool.Name)
		}
	}
	for _, n := range mcpToolNames {
		if !have[n] {
			t.Errorf("tool %s missing (have %v)", n, have)
		}
	}

	res := mcpOK(t, cs, "create_sandbox", map[string]any{"labels": map[string]any{"mcp": transport}})
	var sb api.Sandbox
	mcpStructured(t, res, &sb)
	if sb.ID == "" || sb.State != api.StateRunning || !strings.Contains(mcpText(res), sb.ID) {
		t.Fatalf("create_sandbox: %q", mcpText(res))
	}
	t.Cleanup(func() { shared.c.DeleteSandbox(context.Background(), sb.ID) })
	var list api.SandboxList
	mcpStructured(t, mcpOK(t, cs, "list_sandboxes", map[string]any{"labels": map[string]any{"mcp": transport}}), &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Fatalf("list_sandboxes: %+v", list)
	}

	// State is kept between cells.
	mcpOK(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "sales = [120, 95]\nregion = 'north'"})
	res = mcpOK(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "print(region)\nsum(sales)"})
	if txt := mcpText(res); !strings.Contains(txt, "[stdout]\nnorth\n") || !strings.Contains(txt, "[result]\n215") {
		t.Fatalf("second cell: %q", txt)
	}

	// A chart comes back as an image.
	res = mcpOK(t, cs, "run_code", map[string]any{"sandbox": sb.ID,
		"code": "import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 3), dpi=100)\nplt.bar(['a', 'b'], sales)\nplt.title('sales')\nprint('drawn')"})
	imgs := mcpImages(res)
	if len(imgs) != 1 || imgs[0].MIMEType != "image/png" || !bytes.HasPrefix(imgs[0].Data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("chart: %d images, content %q", len(imgs), mcpText(res))
	}
	img, err := png.Decode(bytes.NewReader(imgs[0].Data))
	// A 4x3 in figure at 100 dpi, cropped to what it draws ('tight').
	if err != nil || img.Bounds().Dx() < 300 || img.Bounds().Dx() > 420 || img.Bounds().Dy() < 220 || img.Bounds().Dy() > 320 {
		t.Fatalf("chart PNG: %v, bounds %v; want about 400x300", err, img.Bounds())
	}
	if !strings.Contains(mcpText(res), "drawn") {
		t.Errorf("chart cell stdout missing: %q", mcpText(res))
	}

	// A cell that raises is a tool error carrying the exception and traceback.
	res = mcpCall(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "def f():\n    return undefined_thing\nf()"})
	if txt := mcpText(res); !res.IsError || !strings.Contains(txt, "NameError") || !strings.Contains(txt, "undefined_thing") || !strings.Contains(txt, "in f") {
		t.Fatalf("raising cell: IsError %v, %q", res.IsError, txt)
	}
	// …and the variables survive it.
	if txt := mcpText(mcpOK(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "len(sales)"})); !strings.Contains(txt, "[result]\n2") {
		t.Fatalf("after the error: %q", txt)
	}

	res = mcpOK(t, cs, "run_command", map[string]any{"sandbox": sb.ID, "command": "echo out; echo err >&2; pwd; exit 3"})
	if txt := mcpText(res); !strings.HasPrefix(txt, "exit_code: 3") || !strings.Contains(txt, "[stdout]\nout\n/workspace\n") || !strings.Contains(txt, "[stderr]\nerr\n") {
		t.Fatalf("run_command: %q", txt)
	}

	// Files, both ways; Python sees what write_file wrote.
	content := "name,value\nalpha,1\nbéta,2\n"
	mcpOK(t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": "data/in.csv", "content": content})
	if txt := mcpText(mcpOK(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "/workspace/data/in.csv"})); txt != content {
		t.Fatalf("read_file: %q, want %q", txt, content)
	}
	mcpOK(t, cs, "run_code", map[string]any{"sandbox": sb.ID, "code": "import pandas as pd\npd.read_csv('data/in.csv').to_csv('out.csv', index=False)\nplt.savefig('chart.png')"})
	if txt := mcpText(mcpOK(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "out.csv"})); txt != content {
		t.Fatalf("read_file of a file the code wrote: %q", txt)
	}
	if imgs := mcpImages(mcpOK(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "chart.png"})); len(imgs) != 1 || imgs[0].MIMEType != "image/png" {
		t.Fatalf("read_file of a PNG: %d images", len(imgs))
	}
	res = mcpCall(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "no/such/file"})
	if !res.IsError || !strings.Contains(mcpText(res), "not_found") {
		t.Fatalf("read_file of a missing file: IsError %v, %q", res.IsError, mcpText(res))
	}

	// A checkpoint is listed among the sandbox's snapshots.
	var sn api.Snapshot
	mcpStructured(t, mcpOK(t, cs, "checkpoint", map[string]any{"sandbox": sb.ID, "name": "mcp-" + transport}), &sn)
	if !strings.HasPrefix(sn.ID, "snap_") || sn.Type != api.SnapshotFilesystem || sn.SandboxID != sb.ID {
		t.Fatalf("checkpoint: %+v", sn)
	}
	var snaps api.SnapshotList
	mcpStructured(t, mcpOK(t, cs, "list_snapshots", map[string]any{"sandbox": sb.ID}), &snaps)
	if len(snaps.Snapshots) != 1 || snaps.Snapshots[0].ID != sn.ID {
		t.Fatalf("list_snapshots: %+v", snaps)
	}

	// An unknown sandbox is a tool error with the daemon's own message.
	_, apiErr := shared.c.GetSandbox(ctxT(t), "sb_mcp_nope")
	var ae *client.APIError
	if !errors.As(apiErr, &ae) || ae.Message == "" {
		t.Fatalf("daemon's answer for an unknown sandbox: %v", apiErr)
	}
	for tool, args := range map[string]map[string]any{
		"run_code":          {"sandbox": "sb_mcp_nope", "code": "1"},
		"run_command":       {"sandbox": "sb_mcp_nope", "command": "true"},
		"terminate_sandbox": {"sandbox": "sb_mcp_nope"},
	} {
		res = mcpCall(t, cs, tool, args)
		if !res.IsError || !strings.Contains(mcpText(res), ae.Message) || !strings.Contains(mcpText(res), "not_found") {
			t.Errorf("%s on an unknown sandbox: IsError %v, %q, want %q", tool, res.IsError, mcpText(res), ae.Message)
		}
	}
	// Bad arguments are tool errors too, not protocol failures.
	if res = mcpCall(t, cs, "run_code", map[string]any{"code": "1"}); !res.IsError {
		t.Errorf("run_code without a sandbox: %q", mcpText(res))
	}

	mcpStructured(t, mcpOK(t, cs, "terminate_sandbox", map[string]any{"sandbox": sb.ID}), &sb)
	if sb.State != api.StateTerminated {
		t.Fatalf("terminate_sandbox: %+v", sb)
	}
	if got, err := shared.c.GetSandbox(ctxT(t), sb.ID); err != nil || got.State != api.StateTerminated {
		t.Fatalf("after terminate: %+v %v", got, err)
	}
}

// TestMCPSuspendResumeFork drives the memory tools through /mcp: a named
// sandbox suspended and resumed keeps its variables, and a fork starts with
// them and then diverges.
func TestMCPSuspendResumeFork(t *testing.T) {
	needRoot(t)
	cs, err := mcpHTTP(t, shared, "")
	if err != nil {
		t.Fatal(err)
	}
	name := "mcp-memory-" + strings.ReplaceAll(time.Now().Format("150405.000"), ".", "")
	var sb api.Sandbox
	mcpStructured(t, mcpOK(t, cs, "create_sandbox", map[string]any{"name": name}), &sb)
	t.Cleanup(func() { shared.c.DeleteSandbox(context.Background(), sb.ID) })
	mcpOK(t, cs, "run_code", map[string]any{"sandbox": name, "code": "x = 41"})

	mcpStructured(t, mcpOK(t, cs, "suspend", map[string]any{"sandbox": name}), &sb)
	if sb.State != api.StateSuspended {
		t.Fatalf("suspend: %+v", sb)
	}
	res := mcpCall(t, cs, "suspend", map[string]any{"sandbox": name})
	if !res.IsError || !strings.Contains(mcpText(res), "failed_precondition") {
		t.Errorf("suspending a suspended sandbox: IsError %v, %q", res.IsError, mcpText(res))
	}
	mcpStructured(t, mcpOK(t, cs, "resume", map[string]any{"sandbox": name}), &sb)
	if sb.State != api.StateRunning {
		t.Fatalf("resume: %+v", sb)
	}
	if txt := mcpText(mcpOK(t, cs, "run_code", map[string]any{"sandbox": name, "code": "x += 1\nx"})); !strings.Contains(txt, "[result]\n42") {
		t.Fatalf("after resume: %q", txt)
	}

	var fr api.ForkResult
	mcpStructured(t, mcpOK(t, cs, "fork", map[string]any{"sandbox": name, "count": 1}), &fr)
	if len(fr.Sandboxes) != 1 || fr.Snapshot.Type != api.SnapshotMemory {
		t.Fatalf("fork: %+v", fr)
	}
	branch := fr.Sandboxes[0].ID
	t.Cleanup(func() { shared.c.DeleteSandbox(context.Background(), branch) })
	if txt := mcpText(mcpOK(t, cs, "run_code", map[string]any{"sandbox": branch, "code": "x = x * 100\nx"})); !strings.Contains(txt, "[result]\n4200") {
		t.Fatalf("fork branch: %q", txt)
	}
	if txt := mcpText(mcpOK(t, cs, "run_code", map[string]any{"sandbox": name, "code": "x"})); !strings.Contains(txt, "[result]\n42") {
		t.Fatalf("source after the fork: %q", txt)
	}
	var snaps api.SnapshotList
	mcpStructured(t, mcpOK(t, cs, "list_snapshots", map[string]any{"sandbox": name}), &snaps)
	if len(snaps.Snapshots) != 1 || snaps.Snapshots[0].ID != fr.Snapshot.ID {
		t.Fatalf("snapshots after the fork: %+v", snaps)
	}
}

// TestMCPAPIKey: /mcp is behind the daemon's API key, and `forkbox mcp`
// passes FORKBOX_API_KEY on.
func TestMCPAPIKey(t *testing.T) {
	needRoot(t)
	const key = "mcp-s3cret"
	d, err := startDaemon(filepath.Join(t.TempDir(), "mcpkeyed"), []string{"FORKBOX_API_KEY=" + key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.deleteAll(); d.stop() })

	resp, err := http.Post("http://"+d.addr+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/mcp without a key: %d, want 401", resp.StatusCode)
	}
	if _, err := mcpHTTP(t, d, ""); err == nil {
		t.Fatal("an MCP client without the key connected")
	}
	if _, err := mcpHTTP(t, d, "wrong"); err == nil {
		t.Fatal("an MCP client with a wrong key connected")
	}
	cs, err := mcpHTTP(t, d, key)
	if err != nil {
		t.Fatalf("with the key: %v", err)
	}
	var list api.SandboxList
	mcpStructured(t, mcpOK(t, cs, "list_sandboxes", nil), &list)
	if list.Sandboxes == nil || len(list.Sandboxes) != 0 {
		t.Fatalf("list_sandboxes: %+v", list)
	}

	// stdio: the key comes from the environment; a wrong one is a tool error.
	mcpOK(t, mcpStdio(t, d, "FORKBOX_API_KEY="+key), "list_sandboxes", nil)
	res := mcpCall(t, mcpStdio(t, d, "FORKBOX_API_KEY=wrong"), "list_sandboxes", nil)
	if !res.IsError || !strings.Contains(mcpText(res), "unauthenticated") {
		t.Fatalf("stdio with a wrong key: IsError %v, %q", res.IsError, mcpText(res))
	}
}
