package api

import "time"

// RunCodeRequest is the body of POST /v1/sandboxes/{sandbox}/code.
type RunCodeRequest struct {
	Code      string            `json:"code"`
	Language  string            `json:"language,omitempty"`   // "python" (default) or a kernelspec name
	Context   string            `json:"context,omitempty"`    // a context id, or "default" (the language's default context)
	TimeoutMS *int64            `json:"timeout_ms,omitempty"` // the cell is interrupted after this
	Env       map[string]string `json:"env,omitempty"`        // set for this cell only (Python)
}

// docs/API.md, "The execution result", describes every field of Execution.

// Execution is the result of running code in a context.
type Execution struct {
	Logs           Logs             `json:"logs"`
	Results        []map[string]any `json:"results"`
	Error          *ExecutionError  `json:"error"`
	ExecutionCount int              `json:"execution_count"`
	ContextID      string           `json:"context_id,omitempty"`
	DurationMS     int64            `json:"duration_ms"`
}

// Logs are what the code printed, in order.
type Logs struct {
	Stdout []string `json:"stdout"`
	Stderr []string `json:"stderr"`
}

// ExecutionError is a failed cell: NameError, SyntaxError, TimeoutError,
// KernelDied, …
type ExecutionError struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
}

// SSE event names of a streaming run_code. stdout/stderr carry OutputChunk,
// result one result object, error an ExecutionError, done the Execution.
const (
	EventResult = "result"
	EventDone   = "done"
	// EventFailure ends a stream whose call failed after it started (data:
	// ErrorBody); a cell's own error is an EventError.
	EventFailure = "failure"
)

// CreateContextRequest is the body of POST /v1/sandboxes/{sandbox}/contexts.
type CreateContextRequest struct {
	Language string            `json:"language,omitempty"` // default "python"
	Cwd      string            `json:"cwd,omitempty"`      // default /workspace
	Env      map[string]string `json:"env,omitempty"`
}

// Context is a kernel-backed code context in a sandbox.
type Context struct {
	ID             string    `json:"id"`
	Language       string    `json:"language"`
	Kernel         string    `json:"kernel"` // kernelspec name
	Cwd            string    `json:"cwd"`
	Default        bool      `json:"default"`
	State          string    `json:"state"` // "new" (no kernel yet), "idle", "busy", "dead"
	ExecutionCount int       `json:"execution_count"`
	CreatedAt      time.Time `json:"created_at"`
}

// ContextList is the body of GET /v1/sandboxes/{sandbox}/contexts.
type ContextList struct {
	Contexts []Context `json:"contexts"`
}

// Cell is one run of code in a sandbox, as its history keeps it: every
// POST /v1/sandboxes/{sandbox}/code (source "user") and every step the chat
// model runs (source "model"). GET /v1/sandboxes/{sandbox}/cells lists them;
// the notebook export is made of them.
type Cell struct {
	ID        string     `json:"id"`
	Sandbox   string     `json:"sandbox"`
	Seq       int        `json:"seq,omitempty"` // from 1, per sandbox; 0 until stored
	Source    CellSource `json:"source"`        // "user" or "model"
	Code      string     `json:"code"`
	Language  string     `json:"language"`
	ContextID string     `json:"context_id,omitempty"`
	Execution *Execution `json:"execution"`
	CreatedAt time.Time  `json:"created_at"`
}

// CellSource is who ran a cell (Cell.Source).
type CellSource string

// Cell sources.
const (
	CellUser  CellSource = "user"
	CellModel CellSource = "model"
)

// CellList is the body of GET /v1/sandboxes/{sandbox}/cells, oldest first.
type CellList struct {
	Cells []Cell `json:"cells"`
}

// NotebookRun answers POST /v1/sandboxes/{sandbox}/notebook (and is the data
// of its SSE "done" event, without Cells): the code cells of an uploaded
// notebook run in order; Stopped says a cell failed and the rest were not
// run.
type NotebookRun struct {
	Cells   []Cell `json:"cells,omitempty"`
	Ran     int    `json:"ran"`
	Total   int    `json:"total"`
	Stopped bool   `json:"stopped"`
}

// EventCell is the SSE event of a notebook run's finished cell (data: a Cell).
const EventCell = "cell"
