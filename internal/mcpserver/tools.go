package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/textcut"
)

// The tools' inputs. The SDK infers each tool's JSON schema from these
// structs (a field with omitempty is optional; the jsonschema tag is the
// property's description); inputSchema adds enums and bounds on top.

type sandboxIn struct {
	Sandbox string `json:"sandbox" jsonschema:"The sandbox: its id (sbx_…) or its name."`
}

type createSandboxIn struct {
	Name                string            `json:"name,omitempty" jsonschema:"Optional unique name to find the sandbox by later (lowercase letters, digits, - and _). A named sandbox is suspended (not terminated) when idle, so its variables and files survive."`
	Image               string            `json:"image,omitempty" jsonschema:"Image to start from (default: the daemon's default Python image)."`
	SnapshotID          string            `json:"snapshot_id,omitempty" jsonschema:"Start from this snapshot (snap_…, from checkpoint or list_snapshots) instead of an image: files, and with a memory snapshot also variables and processes, are as they were."`
	CPUs                *float64          `json:"cpus,omitempty" jsonschema:"CPU cores (may be fractional, e.g. 0.5)."`
	MemoryMB            *int64            `json:"memory_mb,omitempty" jsonschema:"Memory limit in MiB."`
	TimeoutSecs         *int64            `json:"timeout_secs,omitempty" jsonschema:"Idle timeout in seconds: after this long without calls the sandbox is suspended (named) or terminated (unnamed)."`
	AllowInternetAccess bool              `json:"allow_internet_access,omitempty" jsonschema:"Let code in the sandbox reach the internet (default false: no network)."`
	AllowOut            []string          `json:"allow_out,omitempty" jsonschema:"With internet access: destinations to allow beyond the public internet (IPv4 addresses, CIDRs), or domain names (*.pypi.org) to allow only those."`
	DenyOut             []string          `json:"deny_out,omitempty" jsonschema:"With internet access: IPv4 addresses or CIDRs to refuse."`
	Env                 map[string]string `json:"env,omitempty" jsonschema:"Environment variables for everything run in the sandbox."`
	Labels              map[string]string `json:"labels,omitempty" jsonschema:"Labels (key: value) to find the sandbox by with list_sandboxes."`
}

type listSandboxesIn struct {
	State             api.SandboxState  `json:"state,omitempty" jsonschema:"Only sandboxes in this state."`
	Name              string            `json:"name,omitempty" jsonschema:"Only the sandbox with this name."`
	Labels            map[string]string `json:"labels,omitempty" jsonschema:"Only sandboxes that carry all of these labels."`
	IncludeTerminated bool              `json:"include_terminated,omitempty" jsonschema:"Also list terminated sandboxes (left out by default unless state asks for them)."`
}

type runCodeIn struct {
	Sandbox     string  `json:"sandbox" jsonschema:"The sandbox: its id (sbx_…) or its name."`
	Code        string  `json:"code" jsonschema:"The code to run, like a notebook cell: several lines are fine, and the value of the last expression is returned."`
	Language    string  `json:"language,omitempty" jsonschema:"Language of the code: python (the default) or the name of another kernel installed in the image."`
	Context     string  `json:"context,omitempty" jsonschema:"Code context (kernel) to run in; default: the language's default context, shared by all calls that give none."`
	TimeoutSecs float64 `json:"timeout_secs,omitempty" jsonschema:"Interrupt the code after this many seconds (its variables are kept)."`
}

type runCommandIn struct {
	Sandbox     string            `json:"sandbox" jsonschema:"The sandbox: its id (sbx_…) or its name."`
	Command     string            `json:"command" jsonschema:"Shell command line, run with /bin/sh -c (pipes, redirections and && work)."`
	Cwd         string            `json:"cwd,omitempty" jsonschema:"Working directory (default /workspace)."`
	Env         map[string]string `json:"env,omitempty" jsonschema:"Extra environment variables for this command."`
	Stdin       string            `json:"stdin,omitempty" jsonschema:"Text to send to the command's standard input."`
	TimeoutSecs float64           `json:"timeout_secs,omitempty" jsonschema:"Kill the command after this many seconds."`
}

type readFileIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"The sandbox: its id (sbx_…) or its name."`
	Path     string `json:"path" jsonschema:"Path of the file in the sandbox; a relative path is relative to /workspace."`
	MaxBytes int64  `json:"max_bytes,omitempty" jsonschema:"Return at most this many bytes of the file (default 1 MiB); a longer text file is cut, a longer image is refused."`
	Base64   bool   `json:"base64,omitempty" jsonschema:"Return the bytes base64-encoded even when they are text or an image."`
}

type writeFileIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"The sandbox: its id (sbx_…) or its name."`
	Path     string `json:"path" jsonschema:"Path of the file in the sandbox; a relative path is relative to /workspace. Parent directories are created; an existing file is replaced."`
	Content  string `json:"content" jsonschema:"The file's content: text, or base64 when encoding is base64."`
	Encoding string `json:"encoding,omitempty" jsonschema:"How content is encoded: utf-8 (the default, plain text) or base64 (for binary files)."`
	Mode     string `json:"mode,omitempty" jsonschema:"Permission bits in octal, e.g. 0755 for a script (default 0644)."`
}

type checkpointIn struct {
	Sandbox string           `json:"sandbox" jsonschema:"The sandbox: its id (sbx_…) or its name."`
	Type    api.SnapshotType `json:"type,omitempty" jsonschema:"filesystem (the default: files only, fast) or memory (also every variable and process, so a sandbox created from it continues warm)."`
	Name    string           `json:"name,omitempty" jsonschema:"Optional name for the snapshot."`
}

type forkIn struct {
	Sandbox string   `json:"sandbox" jsonschema:"The sandbox to fork (running): its id (sbx_…) or its name."`
	Count   int      `json:"count,omitempty" jsonschema:"How many copies to start (default 1)."`
	Names   []string `json:"names,omitempty" jsonschema:"Optional names for the copies, one per copy."`
}

type listSnapshotsIn struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Only snapshots of this sandbox (id or name); default: all snapshots."`
}

// tools holds what the tool handlers share.
type tools struct {
	b       Backend
	maxRead int64
}

const (
	defaultMaxReadBytes = 1 << 20
	maxReadLimit        = 8 << 20 // a base64 answer must fit the stdio transport's 16 MiB lines
	maxForks            = 16
)

var (
	yes = true
	no  = false
)

func (t *tools) register(s *mcp.Server) {
	add(s, &mcp.Tool{
		Name:  "create_sandbox",
		Title: "Create sandbox",
		Description: "Start a new sandbox: an isolated Linux machine with Python and a Jupyter kernel, no network by default. " +
			"Returns the sandbox (use its id, or its name, in the other tools). Start from a snapshot with snapshot_id.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, nil, t.createSandbox)
	add(s, &mcp.Tool{
		Name:        "list_sandboxes",
		Title:       "List sandboxes",
		Description: "List sandboxes with their id, name, state (running, suspended, …), image and limits. Terminated ones are left out unless asked for.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, func(p map[string]*jsonschema.Schema) {
		p["state"].Enum = anys(api.SandboxStates...)
	}, t.listSandboxes)
	add(s, &mcp.Tool{
		Name:        "terminate_sandbox",
		Title:       "Terminate sandbox",
		Description: "Terminate a sandbox and free everything it holds. Its files and variables are gone (snapshots taken of it stay).",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, nil, t.terminateSandbox)
	add(s, &mcp.Tool{
		Name:  "run_code",
		Title: "Run code",
		Description: "Run code (Python by default) in a sandbox's Jupyter kernel, like a notebook cell. State persists: variables, imports and " +
			"functions defined in one call are there in the next. Returns what the code printed (stdout, stderr), the value of the last " +
			"expression, every matplotlib figure shown or left open as a PNG image, and the error with its traceback if the code raised " +
			"(then the result is marked as an error). pandas, numpy, matplotlib, scipy, scikit-learn and seaborn are installed.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes},
	}, func(p map[string]*jsonschema.Schema) {
		p["timeout_secs"].ExclusiveMinimum = ptr(0.0)
	}, t.runCode)
	add(s, &mcp.Tool{
		Name:  "run_command",
		Title: "Run shell command",
		Description: "Run a shell command in a sandbox (with /bin/sh -c, in /workspace by default) and wait for it. Returns the exit code, stdout and stderr. " +
			"A command that fails is not a tool error: read its exit code.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes},
	}, func(p map[string]*jsonschema.Schema) {
		p["timeout_secs"].ExclusiveMinimum = ptr(0.0)
	}, t.runCommand)
	add(s, &mcp.Tool{
		Name:  "read_file",
		Title: "Read file",
		Description: "Read a file of a sandbox. Text comes back as text, a PNG/JPEG/GIF/WebP picture as an image, other binary data base64-encoded. " +
			"Relative paths are under /workspace.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, func(p map[string]*jsonschema.Schema) {
		p["max_bytes"].Minimum = ptr(1.0)
		p["max_bytes"].Maximum = ptr(float64(maxReadLimit))
	}, t.readFile)
	add(s, &mcp.Tool{
		Name:        "write_file",
		Title:       "Write file",
		Description: "Write a file into a sandbox (creating parent directories, replacing an existing file). Relative paths are under /workspace.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, func(p map[string]*jsonschema.Schema) {
		p["encoding"].Enum = anys("utf-8", "base64")
		p["mode"].Pattern = "^0?[0-7]{3,4}$"
	}, t.writeFile)
	add(s, &mcp.Tool{
		Name:  "checkpoint",
		Title: "Checkpoint sandbox",
		Description: "Save a running sandbox's state as a snapshot; the sandbox keeps running. Roll back or branch later with " +
			"create_sandbox(snapshot_id=…). A memory checkpoint also keeps variables and processes.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, func(p map[string]*jsonschema.Schema) {
		p["type"].Enum = anys(api.SnapshotFilesystem, api.SnapshotMemory)
	}, t.checkpoint)
	add(s, &mcp.Tool{
		Name:  "fork",
		Title: "Fork sandbox",
		Description: "Clone a running sandbox, memory and all, into count new sandboxes that continue from exactly this point (same files, " +
			"variables and processes) and then diverge independently. Returns the memory snapshot and the new sandboxes.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, func(p map[string]*jsonschema.Schema) {
		p["count"].Minimum = ptr(1.0)
		p["count"].Maximum = ptr(float64(maxForks))
		p["names"].MaxItems = ptr(maxForks)
	}, t.fork)
	add(s, &mcp.Tool{
		Name:  "suspend",
		Title: "Suspend sandbox",
		Description: "Suspend a running sandbox: save it to disk with its memory and processes and free its CPU and RAM. " +
			"resume (or any call that needs it) brings it back with its variables and files.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, nil, t.suspend)
	add(s, &mcp.Tool{
		Name:        "resume",
		Title:       "Resume sandbox",
		Description: "Resume a suspended sandbox under the same id and name, with its files, processes and variables as they were.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, nil, t.resume)
	add(s, &mcp.Tool{
		Name:        "list_snapshots",
		Title:       "List snapshots",
		Description: "List snapshots (from checkpoint and fork), newest first: their id (snap_…), type, name and the sandbox they were taken from.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, nil, t.listSnapshots)
}

// handler is a tool's implementation: it returns a result whose Content is
// its answer (nil: out as JSON text) and the structured output out.
type handler[In any] func(ctx context.Context, in In) (*mcp.CallToolResult, any, error)

// add registers a tool with In's inferred input schema, adjusted by patch
// (which gets the schema's properties), and reports an error of h as a tool
// error (IsError, with the daemon's message) rather than a protocol error.
func add[In any](s *mcp.Server, tool *mcp.Tool, patch func(map[string]*jsonschema.Schema), h handler[In]) {
	schema, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: schema of %s: %v", tool.Name, err))
	}
	if patch != nil {
		patch(schema.Properties)
	}
	tool.InputSchema = schema
	mcp.AddTool(s, tool, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		res, out, err := h(ctx, in)
		if err != nil {
			return nil, nil, toolError(err)
		}
		return res, out, nil
	})
}

// toolError phrases an error for the model: a daemon's answer as its code
// and message ("not_found: sandbox \"x\" not found"), a transport failure
// as an unreachable daemon.
func toolError(err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) {
		if ae.Code == "" {
			return errors.New(ae.Error())
		}
		return fmt.Errorf("%s: %s", ae.Code, ae.Error())
	}
	var ue *url.Error
	if errors.As(err, &ue) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("cannot reach the forkbox daemon: %v", err)
	}
	return err
}

// invalid is an error of the tool's input, found before calling forkbox.
func invalid(format string, args ...any) error {
	return fmt.Errorf("invalid_argument: "+format, args...)
}

func needSandbox(sb string) error {
	if strings.TrimSpace(sb) == "" {
		return invalid("sandbox is required: give a sandbox id (sbx_…) or name")
	}
	return nil
}

func (t *tools) createSandbox(ctx context.Context, in createSandboxIn) (*mcp.CallToolResult, any, error) {
	req := api.CreateSandboxRequest{
		Name: in.Name, Image: in.Image, SnapshotID: in.SnapshotID, CPUs: in.CPUs, MemoryMB: in.MemoryMB,
		TimeoutSecs: in.TimeoutSecs, AllowInternetAccess: in.AllowInternetAccess, Env: in.Env, Labels: in.Labels,
	}
	if len(in.AllowOut) > 0 || len(in.DenyOut) > 0 {
		req.Network = &api.NetworkPolicy{AllowOut: in.AllowOut, DenyOut: in.DenyOut}
	}
	sb, err := t.b.CreateSandbox(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	return nil, sb, nil
}

func (t *tools) listSandboxes(ctx context.Context, in listSandboxesIn) (*mcp.CallToolResult, any, error) {
	list, err := t.b.ListSandboxes(ctx, client.ListOptions{State: in.State, Name: in.Name, Labels: in.Labels, IncludeTerminated: in.IncludeTerminated})
	if err != nil {
		return nil, nil, err
	}
	out := api.SandboxList{Sandboxes: []api.Sandbox{}}
	for _, sb := range list.Sandboxes {
		if sb.State == api.StateTerminated && !in.IncludeTerminated && in.State != api.StateTerminated {
			continue
		}
		out.Sandboxes = append(out.Sandboxes, sb)
	}
	return nil, out, nil
}

func (t *tools) terminateSandbox(ctx context.Context, in sandboxIn) (*mcp.CallToolResult, any, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, nil, err
	}
	sb, err := t.b.DeleteSandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, nil, err
	}
	return nil, sb, nil
}

func (t *tools) runCode(ctx context.Context, in runCodeIn) (*mcp.CallToolResult, any, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, nil, err
	}
	req := api.RunCodeRequest{Code: in.Code, Language: in.Language, Context: in.Context}
	if in.TimeoutSecs > 0 {
		ms := int64(in.TimeoutSecs*1000 + 0.5)
		req.TimeoutMS = &ms
	}
	ex, err := t.b.RunCode(ctx, in.Sandbox, req)
	if err != nil {
		return nil, nil, err
	}
	res := executionResult(ex)
	return res, executionSummary(ex), nil
}

func (t *tools) runCommand(ctx context.Context, in runCommandIn) (*mcp.CallToolResult, any, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, nil, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return nil, nil, invalid("command is empty")
	}
	req := api.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", in.Command}, Cwd: in.Cwd, Env: in.Env, Stdin: in.Stdin}
	if in.TimeoutSecs > 0 {
		req.TimeoutSecs = &in.TimeoutSecs
	}
	r, err := t.b.Exec(ctx, in.Sandbox, req)
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: execText(r)}}}, r, nil
}

// execText renders a command's result for the model.
func execText(r *api.ExecResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit_code: %d", r.ExitCode)
	switch {
	case r.TimedOut:
		b.WriteString(" (timed out, killed)")
	case r.OOMKilled:
		b.WriteString(" (killed: out of memory)")
	case r.Signal != "":
		fmt.Fprintf(&b, " (killed by %s)", r.Signal)
	}
	if r.Error != "" && !r.TimedOut {
		fmt.Fprintf(&b, "\nerror: %s", r.Error)
	}
	section(&b, "stdout", r.Stdout)
	section(&b, "stderr", r.Stderr)
	return b.String()
}

// section appends "\n[name]\ntext" when text is not empty.
func section(b *strings.Builder, name, text string) {
	if text == "" {
		return
	}
	fmt.Fprintf(b, "\n[%s]\n%s", name, text)
}

// limitWriter keeps the first n bytes written to it and fails the write that
// would pass them, which stops a download early.
type limitWriter struct {
	buf bytes.Buffer
	n   int64
}

var errLimit = errors.New("read limit reached")

func (w *limitWriter) Write(p []byte) (int, error) {
	room := w.n - int64(w.buf.Len())
	if int64(len(p)) <= room {
		return w.buf.Write(p)
	}
	w.buf.Write(p[:room])
	return int(room), errLimit
}

func (t *tools) readFile(ctx context.Context, in readFileIn) (*mcp.CallToolResult, any, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, nil, err
	}
	if in.Path == "" {
		return nil, nil, invalid("path is empty")
	}
	limit := t.maxRead
	if in.MaxBytes > 0 {
		limit = min(in.MaxBytes, maxReadLimit)
	}
	w := &limitWriter{n: limit}
	_, err := t.b.ReadFileTo(ctx, in.Sandbox, in.Path, w)
	truncated := errors.Is(err, errLimit)
	if err != nil && !truncated {
		return nil, nil, err
	}
	return fileResult(in.Path, w.buf.Bytes(), truncated, in.Base64)
}

// fileResult renders a file's bytes for the model: an image as image
// content, valid UTF-8 as text, anything else (or everything, when asked)
// base64-encoded.
func fileResult(path string, data []byte, truncated, forceBase64 bool) (*mcp.CallToolResult, any, error) {
	size := int64(len(data))
	note := ""
	if truncated {
		note = fmt.Sprintf("\n[truncated: only the first %d bytes are shown; pass a larger max_bytes (up to %d) or use run_command with head, tail or sed]", size, maxReadLimit)
	}
	mime := sniff(data)
	switch {
	case forceBase64:
		text := fmt.Sprintf("%s: %d bytes (%s), base64:\n%s%s", path, size, mime, base64.StdEncoding.EncodeToString(data), note)
		return textResult(text), nil, nil
	case isImage(mime):
		if truncated {
			return nil, nil, invalid("%s is an image larger than %d bytes; pass a larger max_bytes (up to %d)", path, size, maxReadLimit)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: fmt.Sprintf("%s: %d bytes, %s", path, size, mime)},
			&mcp.ImageContent{MIMEType: mime, Data: data},
		}}, nil, nil
	}
	text := data
	if truncated {
		text = textcut.Complete(text)
	}
	if isText(text) {
		return textResult(string(text) + note), nil, nil
	}
	return textResult(fmt.Sprintf("%s: %d bytes of binary data (%s), base64:\n%s%s", path, size, mime, base64.StdEncoding.EncodeToString(data), note)), nil, nil
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func (t *tools) writeFile(ctx context.Context, in writeFileIn) (*mcp.CallToolResult, any, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, nil, err
	}
	if in.Path == "" {
		return nil, nil, invalid("path is empty")
	}
	data := []byte(in.Content)
	switch strings.ToLower(in.Encoding) {
	case "", "utf-8", "utf8", "text":
	case "base64":
		b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(in.Content), ""))
		if err != nil {
			return nil, nil, invalid("content is not valid base64: %v", err)
		}
		data = b
	default:
		return nil, nil, invalid("encoding %q: want utf-8 or base64", in.Encoding)
	}
	var mode os.FileMode
	if in.Mode != "" {
		m, err := strconv.ParseUint(in.Mode, 8, 32)
		if err != nil || m > 0o7777 {
			return nil, nil, invalid("mode %q: want octal permission bits like 0644 or 0755", in.Mode)
		}
		mode = os.FileMode(m)
	}
	r, err := t.b.WriteFile(ctx, in.Sandbox, in.Path, bytes.NewReader(data), mode)
	if err != nil {
		return nil, nil, err
	}
	return nil, r, nil
}

func (t *tools) checkpoint(ctx context.Context, in checkpointIn) (*mcp.CallToolResult, any, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, nil, err
	}
	sn, err := t.b.Checkpoint(ctx, in.Sandbox, api.CheckpointRequest{Type: in.Type, Name: in.Name})
	if err != nil {
		return nil, nil, err
	}
	return nil, sn, nil
}

func (t *tools) fork(ctx context.Context, in forkIn) (*mcp.CallToolResult, any, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, nil, err
	}
	n := in.Count
	if n == 0 {
		n = max(len(in.Names), 1)
	}
	r, err := t.b.Fork(ctx, in.Sandbox, api.ForkRequest{Count: n, Names: in.Names})
	if err != nil {
		return nil, nil, err
	}
	return nil, r, nil
}

func (t *tools) suspend(ctx context.Context, in sandboxIn) (*mcp.CallToolResult, any, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, nil, err
	}
	sb, err := t.b.Suspend(ctx, in.Sandbox)
	if err != nil {
		return nil, nil, err
	}
	return nil, sb, nil
}

func (t *tools) resume(ctx context.Context, in sandboxIn) (*mcp.CallToolResult, any, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, nil, err
	}
	sb, err := t.b.Resume(ctx, in.Sandbox)
	if err != nil {
		return nil, nil, err
	}
	return nil, sb, nil
}

func (t *tools) listSnapshots(ctx context.Context, in listSnapshotsIn) (*mcp.CallToolResult, any, error) {
	list, err := t.b.ListSnapshots(ctx, in.Sandbox)
	if err != nil {
		return nil, nil, err
	}
	if list.Snapshots == nil {
		list.Snapshots = []api.Snapshot{}
	}
	return nil, list, nil
}

// anys is an enum's values as JSON decodes them: plain strings, whatever
// string type the constants have.
func anys[S ~string](vs ...S) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
