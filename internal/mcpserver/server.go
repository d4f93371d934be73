// Package mcpserver is forkbox's Model Context Protocol server: it gives an
// LLM agent tools to create sandboxes, run code and commands in them, move
// files, and checkpoint, fork, suspend and resume them. It is built on the
// official Go MCP SDK (github.com/modelcontextprotocol/go-sdk).
//
// The tools call a Backend, which the Go SDK's *client.Client satisfies, so
// one server serves both `forkbox mcp` (stdio, talking to a daemon over HTTP)
// and the daemon's own /mcp endpoint (streamable HTTP, with a client from
// InProcess that calls the daemon's API handler in-process).
package mcpserver

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
)

// Backend is what the tools need of forkbox. *client.Client implements it;
// the method signatures are the Go SDK's.
type Backend interface {
	CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error)
	ListSandboxes(ctx context.Context, opts client.ListOptions) (*api.SandboxList, error)
	DeleteSandbox(ctx context.Context, sandbox string) (*api.Sandbox, error)
	RunCode(ctx context.Context, sandbox string, req api.RunCodeRequest) (*api.Execution, error)
	Exec(ctx context.Context, sandbox string, req api.ExecRequest) (*api.ExecResult, error)
	ReadFileTo(ctx context.Context, sandbox, path string, w io.Writer) (int64, error)
	WriteFile(ctx context.Context, sandbox, path string, r io.Reader, mode os.FileMode) (*api.WriteFileResult, error)
	Checkpoint(ctx context.Context, sandbox string, req api.CheckpointRequest) (*api.Snapshot, error)
	Fork(ctx context.Context, sandbox string, req api.ForkRequest) (*api.ForkResult, error)
	Suspend(ctx context.Context, sandbox string) (*api.Sandbox, error)
	Resume(ctx context.Context, sandbox string) (*api.Sandbox, error)
	ListSnapshots(ctx context.Context, sandbox string) (*api.SnapshotList, error)
}

var _ Backend = (*client.Client)(nil)

// Version is reported to MCP clients as the server's version.
var Version = "1"

// instructions tell the model how the tools fit together.
const instructions = `forkbox runs stateful code-interpreter sandboxes: isolated Linux machines with Python (pandas, numpy, matplotlib, scipy, scikit-learn, seaborn) and a Jupyter kernel.
Typical use: create_sandbox once, then run_code as often as needed — variables, imports and files persist between run_code calls on the same sandbox, like cells of a notebook. The value of a cell's last expression and every matplotlib figure come back (figures as PNG images). Use run_command for shell commands (ls, grep, python scripts, …), write_file/read_file to move files in and out (relative paths are under /workspace).
checkpoint saves a sandbox's state as a snapshot (create_sandbox with snapshot_id starts a new sandbox from it); fork clones a running sandbox, memory and all, into independent copies; suspend frees an idle sandbox's CPU and RAM and resume brings it back exactly as it was. Call terminate_sandbox when done.`

// Options configure New.
type Options struct {
	// Logger logs MCP protocol activity; nil logs nothing.
	Logger *slog.Logger
	// MaxReadBytes is the most read_file returns when the call does not say
	// (default 1 MiB).
	MaxReadBytes int64
}

// New returns an MCP server whose tools act through b.
func New(b Backend, opts *Options) *mcp.Server {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = defaultMaxReadBytes
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "forkbox", Title: "forkbox sandboxes", Version: Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       o.Logger,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	t := &tools{b: b, maxRead: o.MaxReadBytes}
	t.register(s)
	return s
}

// ServeStdio serves MCP on the process's stdin and stdout until the client
// closes stdin or ctx ends.
func ServeStdio(ctx context.Context, b Backend, opts *Options) error {
	return New(b, opts).Run(ctx, &mcp.StdioTransport{})
}

// HTTPHandler returns the streamable-HTTP MCP endpoint (the daemon mounts it
// at /mcp behind its API-key check). It is stateless: every POST is served on
// its own, so there is no session to lose when the daemon restarts and no
// long-lived stream to hold up its shutdown.
func HTTPHandler(b Backend, opts *Options) http.Handler {
	s := New(b, opts)
	var logger *slog.Logger
	if opts != nil {
		logger = opts.Logger
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		Logger:              logger,
		MaxRequestBodyBytes: MaxRequestBodyBytes,
	})
}

// MaxRequestBodyBytes bounds a POST to the streamable-HTTP endpoint
// (write_file carries whole files): a longer one is answered 413.
const MaxRequestBodyBytes = 64 << 20

// Handler is the daemon's /mcp endpoint over its own API handler api (the
// mux behind authentication): HTTPHandler(InProcess(api), nil).
func Handler(api http.Handler) http.Handler {
	return HTTPHandler(InProcess(api), nil)
}
