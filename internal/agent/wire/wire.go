// Package wire is what forkbox's daemon and a sandbox's agent say to each
// other: the paths inside a sandbox, the agent's config, and the bodies of
// the agent's HTTP API (requests, NDJSON events, answers, errors). Both
// sides import it, the agent (internal/agent/server) and the daemon's client
// for it (internal/agent/client); it holds no server or client code, so
// that neither side links the other's.
//
// The agent speaks HTTP/1.1 over a Unix socket in /.forkbox/run (RunDir), a
// directory bind-mounted from the daemon's side. Why a listening Unix socket
// reached through a bind mount: the daemon holds no long-lived connection
// into the sandbox, so a CRIU checkpoint of the whole sandbox sees only a
// listening socket (which CRIU restores) once the daemon has closed its idle
// connections, and a restored agent keeps serving on the same path inside
// whatever host directory the restore binds there.
package wire

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// Paths inside a sandbox.
const (
	// Dir is forkbox's own directory inside a sandbox (a root-only tmpfs).
	Dir = "/.forkbox"
	// Binary is where the forkbox binary is bind-mounted read-only.
	Binary = Dir + "/forkbox"
	// RunDir holds the agent's socket, config and log (a bind of the host's <sandbox dir>/run).
	RunDir = Dir + "/run"
	// SocketName is the agent's socket inside RunDir.
	SocketName = "agent.sock"
	// ConfigName is the agent's config inside RunDir.
	ConfigName = "agent.json"
	// LogName is the agent's log inside RunDir.
	LogName = "agent.log"
)

// Config is what the agent reads at start from RunDir/ConfigName.
type Config struct {
	SandboxID string   `json:"sandbox_id"`
	UID       int      `json:"uid"`
	GID       int      `json:"gid"`
	WorkDir   string   `json:"workdir"`
	Env       []string `json:"env"`
	// Build marks an image-build sandbox: the agent keeps the build
	// capabilities and runs ExecRequests with Root as root.
	Build bool `json:"build,omitempty"`
}

// ExecRequest asks the agent to run a command as the sandbox user.
type ExecRequest struct {
	Cmd       string   `json:"cmd"`
	Args      []string `json:"args,omitempty"`
	Env       []string `json:"env,omitempty"` // KEY=VALUE, over the sandbox's env
	Cwd       string   `json:"cwd,omitempty"`
	Stdin     []byte   `json:"stdin,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"` // 0: none
	// Root runs the command as root with the build capabilities; only a
	// build sandbox's agent accepts it.
	Root bool `json:"root,omitempty"`
	// ID, when set (1 to 64 of A-Z a-z 0-9 _ -, unique among the execs
	// running), registers the exec while it runs: POST /exec/input and
	// POST /exec/signal reach it by this ID.
	ID string `json:"id,omitempty"`
	// KeepStdin keeps the command's stdin open after Stdin is written,
	// for POST /exec/input; it needs an ID.
	KeepStdin bool `json:"keep_stdin,omitempty"`
	// PTY, when set, runs the command on a new pseudo-terminal of this
	// size, its controlling terminal and its stdin, stdout and stderr:
	// output streams as "pty" events, input (POST /exec/input) goes to the
	// terminal, POST /exec/resize changes its size. It needs an ID and
	// implies KeepStdin.
	PTY *PTYSize `json:"pty,omitempty"`
}

// PTYSize is a terminal's size in characters.
type PTYSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// MaxPTYSize bounds a terminal's columns and rows.
const MaxPTYSize = 1000

// Check says what is wrong with a terminal size, if anything: both
// columns and rows are 1 to MaxPTYSize.
func (p PTYSize) Check() error {
	if p.Cols < 1 || p.Cols > MaxPTYSize || p.Rows < 1 || p.Rows > MaxPTYSize {
		return errdefs.InvalidArgument("pty size %dx%d: columns and rows are 1 to %d", p.Cols, p.Rows, MaxPTYSize)
	}
	return nil
}

// ExecResizeRequest sets the terminal size of a running exec started with
// a PTY.
type ExecResizeRequest struct {
	ID string `json:"id"`
	PTYSize
}

// ExecInputRequest writes to a running exec's stdin and/or closes it.
type ExecInputRequest struct {
	ID    string `json:"id"`
	Data  []byte `json:"data,omitempty"`
	Close bool   `json:"close,omitempty"`
}

// ExecSignalRequest signals a running exec's process group.
type ExecSignalRequest struct {
	ID     string `json:"id"`
	Signal string `json:"signal"`
}

// MaxExecInput bounds the data of one ExecInputRequest.
const MaxExecInput = 1 << 20

// ExecEvent is one line of the agent's NDJSON exec stream: output, or the
// final exit status.
type ExecEvent struct {
	Stream string      `json:"stream,omitempty"` // "stdout", "stderr", or "pty" (an exec with a PTY)
	Data   []byte      `json:"data,omitempty"`
	Exit   *ExitStatus `json:"exit,omitempty"`
	// Started is sent once the command has started (and, with an ID, is
	// registered); an agent from before it sends none.
	Started bool `json:"started,omitempty"`
}

// ExitStatus is how a command ended.
type ExitStatus struct {
	Code       int    `json:"code"`             // -1 when killed by a signal
	Signal     string `json:"signal,omitempty"` // e.g. "killed"
	TimedOut   bool   `json:"timed_out,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"` // why it could not start, or was killed
}

// FileEntry is one directory entry.
type FileEntry struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
}

// CreateContextRequest asks the agent for a new code context.
type CreateContextRequest struct {
	// ID, when set, is the new context's id, chosen by the daemon: it
	// matches ^ctx_[0-9a-f]{8}$ and is not in use. Empty: a random id.
	ID       string   `json:"id,omitempty"`
	Language string   `json:"language,omitempty"`
	Cwd      string   `json:"cwd,omitempty"`
	Env      []string `json:"env,omitempty"`
}

// PrestartRequest starts a language's default kernel ahead of its first
// cell ("": python), hidden until that cell.
type PrestartRequest struct {
	Language string `json:"language,omitempty"`
}

// CodeRequest runs a cell in a context ("" or "default": the language's default).
type CodeRequest struct {
	Code      string            `json:"code"`
	Language  string            `json:"language,omitempty"`
	Context   string            `json:"context,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	Env       map[string]string `json:"env,omitempty"` // for this cell only (Python)
}

// CodeEvent is one line of the agent's NDJSON code stream: "stdout",
// "stderr", "result", "error" while the cell runs, then "done" with the
// execution, or "failure" if the call itself failed.
type CodeEvent struct {
	Type      string              `json:"type"`
	Text      string              `json:"text,omitempty"`
	Result    map[string]any      `json:"result,omitempty"`
	Error     *api.ExecutionError `json:"error,omitempty"`
	Execution *api.Execution      `json:"execution,omitempty"`
	ContextID string              `json:"context_id,omitempty"`
	PID       int                 `json:"pid,omitempty"` // the kernel's pid inside the sandbox
}

// JupyterMessage is one Jupyter protocol message crossing the agent's API.
type JupyterMessage struct {
	Seq      int64           `json:"seq,omitempty"` // set on received messages: 1, 2, … per context
	Channel  string          `json:"channel"`       // shell, iopub, control, stdin
	Header   json.RawMessage `json:"header"`
	Parent   json.RawMessage `json:"parent_header"`
	Metadata json.RawMessage `json:"metadata"`
	Content  json.RawMessage `json:"content"`
	Buffers  [][]byte        `json:"buffers,omitempty"` // base64 in JSON
}

// JupyterRecvAnswer answers a receive: the messages after the cursor.
type JupyterRecvAnswer struct {
	Head     int64            `json:"head"`    // seq of the newest message the context holds (0: none yet)
	Dropped  int64            `json:"dropped"` // messages after the cursor that were evicted before this receive
	Messages []JupyterMessage `json:"messages"`
}

// SelfReport is what the agent's process looks like to itself (GET /self):
// its dumpable flag (anything but 1: no other process may read its memory
// or ptrace it),
// its capability sets as /proc/<pid>/status shows them and the sets it
// means to hold, its supplementary groups and no_new_privs. The daemon does
// not need it; tests check with it that an agent restored from a snapshot
// is as locked down as one that started.
type SelfReport struct {
	Dumpable   int    `json:"dumpable"`
	CapEff     string `json:"cap_eff"`
	CapPrm     string `json:"cap_prm"`
	WantEff    string `json:"want_eff"`
	WantPrm    string `json:"want_prm"`
	Groups     []int  `json:"groups"`
	NoNewPrivs int    `json:"no_new_privs"`
}

// ErrorBody is the agent's error answer.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// MergeEnv overlays KEY=VALUE entries of b on a.
func MergeEnv(a, b []string) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(a)+len(b))
	for _, list := range [][]string{a, b} {
		for _, kv := range list {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := idx[k]; ok {
				out[i] = kv
				continue
			}
			idx[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// WatchRequest is the body of POST /watch: the directory to watch, and
// whether its subdirectories too.
type WatchRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// WatchEvent is one line of a watch's answer: Started first, then changes
// (Name relative to the watched directory; Op one of create, write,
// remove, rename, chmod), and Keepalive when nothing happened for a while.
type WatchEvent struct {
	Started   bool   `json:"started,omitempty"`
	Keepalive bool   `json:"keepalive,omitempty"`
	Name      string `json:"name,omitempty"`
	Op        string `json:"op,omitempty"`
}
