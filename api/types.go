// Package api holds the JSON wire types of forkbox's HTTP API (v1). The daemon's
// handlers, the Go client and the CLI all use these types, so the three cannot
// drift apart; /v1/openapi.json documents the same shapes.
package api

import (
	"slices"
	"time"
)

// How the states below follow one another, and what survives a daemon
// restart in each, is in docs/ARCHITECTURE.md, "States and transitions".

// SandboxState is a sandbox's lifecycle state (Sandbox.State).
type SandboxState string

// Sandbox lifecycle states.
const (
	StateCreating   SandboxState = "creating"
	StateRunning    SandboxState = "running"
	StateSuspending SandboxState = "suspending"
	StateSuspended  SandboxState = "suspended"
	StateResuming   SandboxState = "resuming"
	StateTerminated SandboxState = "terminated"
	StateError      SandboxState = "error"
	// StateLost: the sandbox was running on a node of a cluster that
	// stopped answering; its processes are gone with the node (should the
	// node come back with them, it is running again).
	StateLost SandboxState = "lost"
)

// SandboxStates are all the states, in the order of the const block above.
var SandboxStates = []SandboxState{StateCreating, StateRunning, StateSuspending, StateSuspended,
	StateResuming, StateTerminated, StateError, StateLost}

// Valid reports whether s is one of SandboxStates.
func (s SandboxState) Valid() bool { return slices.Contains(SandboxStates, s) }

// HoldsProcesses reports whether a sandbox in state s has processes on its
// node, or is starting them: creating, running, suspending or resuming.
// (docs/ARCHITECTURE.md calls a sandbox live in every state but terminated.)
func (s SandboxState) HoldsProcesses() bool {
	switch s {
	case StateCreating, StateRunning, StateSuspending, StateResuming:
		return true
	}
	return false
}

// Ended reports whether a sandbox in state s will not run again:
// terminated, or error (which only a delete leaves).
func (s SandboxState) Ended() bool {
	return s == StateTerminated || s == StateError
}

// CreateSandboxRequest is the body of POST /v1/sandboxes. Pointer fields are
// optional; the daemon fills defaults and validates ranges.
type CreateSandboxRequest struct {
	Name                string   `json:"name,omitempty"`
	Image               string   `json:"image,omitempty"`
	SnapshotID          string   `json:"snapshot_id,omitempty"`
	CPUs                *float64 `json:"cpus,omitempty"`
	MemoryMB            *int64   `json:"memory_mb,omitempty"`
	DiskMB              *int64   `json:"disk_mb,omitempty"`
	PIDsLimit           *int64   `json:"pids_limit,omitempty"`
	TimeoutSecs         *int64   `json:"timeout_secs,omitempty"`
	MaxLifetimeSecs     *int64   `json:"max_lifetime_secs,omitempty"`
	AllowInternetAccess bool     `json:"allow_internet_access,omitempty"`
	// Network refines what a sandbox with internet access may reach
	// (default: the public internet only).
	Network *NetworkPolicy    `json:"network,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// AutoResume (default true): a call that needs a suspended sandbox
	// running resumes it; false makes such calls answer 409.
	AutoResume *bool `json:"auto_resume,omitempty"`
	// SuspendOnIdle: an idle sandbox is suspended rather than terminated
	// even without a name (named sandboxes always are).
	SuspendOnIdle bool `json:"suspend_on_idle,omitempty"`
	// Pool hands out a ready sandbox of that warm pool (falling back to a
	// normal restore when it is empty).
	Pool string `json:"pool,omitempty"`
	// Node runs the sandbox on that node of a cluster (default: the
	// daemon places it on a node with room).
	Node string `json:"node,omitempty"`
}

// Sandbox is the sandbox object the API returns.
type Sandbox struct {
	ID                  string            `json:"id"`
	Name                string            `json:"name,omitempty"`
	State               SandboxState      `json:"state"`
	StateReason         string            `json:"state_reason,omitempty"`
	Image               string            `json:"image"`
	SnapshotID          string            `json:"snapshot_id,omitempty"`
	CPUs                float64           `json:"cpus"`
	MemoryMB            int64             `json:"memory_mb"`
	DiskMB              int64             `json:"disk_mb"`
	PIDsLimit           int64             `json:"pids_limit"`
	TimeoutSecs         int64             `json:"timeout_secs"`
	MaxLifetimeSecs     int64             `json:"max_lifetime_secs,omitempty"`
	AllowInternetAccess bool              `json:"allow_internet_access"`
	Network             *NetworkPolicy    `json:"network,omitempty"`
	AutoResume          bool              `json:"auto_resume"`
	SuspendOnIdle       bool              `json:"suspend_on_idle,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
	Labels              map[string]string `json:"labels,omitempty"`
	CreatedAt           time.Time         `json:"created_at"`
	LastActiveAt        time.Time         `json:"last_active_at"`
	TerminatedAt        *time.Time        `json:"terminated_at,omitempty"`
	Usage               *Usage            `json:"usage,omitempty"`
	// Node is the node of the cluster that runs the sandbox (or holds its
	// suspend image); absent on a single daemon.
	Node string `json:"node,omitempty"`
}

// NetworkPolicy is the egress policy of a sandbox with internet access. By
// default it reaches the public internet only: loopback, link-local (the
// cloud metadata address among them), RFC 1918, CGNAT, multicast and
// reserved ranges are refused, as are the host and other sandboxes.
// AllowOut entries (IPv4 addresses, CIDRs, domain names, "*.example.com"
// for every name under example.com) are reachable even where a default or
// DenyOut covers them; DenyOut entries (addresses, CIDRs) are refused. A
// domain name in AllowOut makes the policy an allow-list: only allowed
// names resolve, and every destination not allowed is refused.
type NetworkPolicy struct {
	AllowOut []string `json:"allow_out,omitempty"`
	DenyOut  []string `json:"deny_out,omitempty"`
}

// UpdateSandboxRequest is the body of PATCH /v1/sandboxes/{sandbox}. Absent
// fields are left as they are.
type UpdateSandboxRequest struct {
	// Network replaces the egress policy (an empty object: the default);
	// it applies to a running sandbox at once.
	Network *NetworkPolicy `json:"network,omitempty"`
	// TimeoutSecs replaces the idle timeout, counted from now.
	TimeoutSecs *int64 `json:"timeout_secs,omitempty"`
}

// Port is how to reach a server listening on a port inside a sandbox:
// GET /v1/sandboxes/{sandbox}/ports/{port}. Requests to Path (and below it)
// are proxied to 127.0.0.1:port in the sandbox, resuming it when it is
// suspended; they need the API key, or Token (header X-Forkbox-Token or
// query parameter forkbox_token), unless Public.
type Port struct {
	Sandbox string `json:"sandbox"`
	Port    int    `json:"port"`
	// Path is the proxy's path on the daemon, ending in "/".
	Path string `json:"path"`
	// URL is Path on the address the request came to.
	URL string `json:"url"`
	// HostURL, when the daemon has a ports domain, reaches the port at "/"
	// of a host name of its own (<port>-<sandbox>.<domain>): for apps that
	// must be served at the root. A token given there as ?forkbox_token=
	// is kept in a cookie of that host.
	HostURL string `json:"host_url,omitempty"`
	Token   string `json:"token"`
	Public  bool   `json:"public"`
	// Listening says a process in the sandbox listens on the port now
	// (set in listings); Process names it (what the sandbox calls it).
	Listening bool   `json:"listening,omitempty"`
	Process   string `json:"process,omitempty"`
}

// PortList is the body of GET /v1/sandboxes/{sandbox}/ports: the ports
// listening in the sandbox now (its Jupyter kernels' left out) and those
// with access settings, by port. Tokens are not listed (GET the port).
type PortList struct {
	Ports []Port `json:"ports"`
}

// UpdatePortRequest is the body of PUT /v1/sandboxes/{sandbox}/ports/{port}.
type UpdatePortRequest struct {
	// Public lets anyone reach the port, without key or token.
	Public bool `json:"public,omitempty"`
}

// Usage reports what a running sandbox consumes now.
type Usage struct {
	CPUSeconds      float64 `json:"cpu_seconds"`
	MemoryBytes     int64   `json:"memory_bytes"`
	MemoryPeakBytes int64   `json:"memory_peak_bytes"`
	PIDs            int64   `json:"pids"`
	DiskUsedBytes   int64   `json:"disk_used_bytes"`
	// RunningSeconds and SuspendedSeconds add up the time spent in each
	// state since creation (from the state history).
	RunningSeconds   float64 `json:"running_seconds"`
	SuspendedSeconds float64 `json:"suspended_seconds"`
}

// SandboxList is the body of GET /v1/sandboxes: one page of sandboxes,
// newest first.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
	// NextCursor, when set, is the cursor of the next page (pass it as
	// ?cursor=); absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ExecRequest is the body of POST /v1/sandboxes/{sandbox}/exec.
type ExecRequest struct {
	Cmd         string            `json:"cmd"`
	Args        []string          `json:"args,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Cwd         string            `json:"cwd,omitempty"`
	Stdin       string            `json:"stdin,omitempty"`
	TimeoutSecs *float64          `json:"timeout_secs,omitempty"`
}

// ExecResult is the answer of a non-streaming exec. ExitCode is -1 when the
// process was killed by a signal; Error then says why in words.
type ExecResult struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exit_code"`
	DurationMS int64  `json:"duration_ms"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	OOMKilled  bool   `json:"oom_killed,omitempty"`
	Error      string `json:"error,omitempty"`
}

// SSE event names of a streaming exec. Each stdout/stderr event's data is
// {"data": "..."}; the exit event's data is an ExecResult without output.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventExit   = "exit"
	EventError  = "error"
)

// OutputChunk is the data of a stdout or stderr SSE event.
type OutputChunk struct {
	Data string `json:"data"`
}

// FileInfo describes one entry of GET /v1/sandboxes/{sandbox}/files/list.
type FileInfo struct {
	Name       string    `json:"name"`
	Path       string    `json:"path"`
	Type       string    `json:"type"` // "file", "dir", "symlink" or "other"
	Size       int64     `json:"size"`
	Mode       string    `json:"mode"`
	ModifiedAt time.Time `json:"modified_at"`
}

// FileList is the body of GET /v1/sandboxes/{sandbox}/files/list.
type FileList struct {
	Path    string     `json:"path"`
	Entries []FileInfo `json:"entries"`
}

// WriteFileResult answers PUT /v1/sandboxes/{sandbox}/files.
type WriteFileResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// Error is the body of every error answer.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody carries the machine-readable code and the human message.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RequestID names the request in the daemon's log (also sent as the
	// X-Request-Id header), so an internal error can be traced.
	RequestID string `json:"request_id,omitempty"`
	// Quota, on a 429 for a tenant's quota, names it with its numbers.
	Quota *QuotaExceeded `json:"quota,omitempty"`
}

// SnapshotType is what a snapshot holds (Snapshot.Type).
type SnapshotType string

// Snapshot types.
const (
	SnapshotFilesystem SnapshotType = "filesystem"
	SnapshotMemory     SnapshotType = "memory"
)

// Valid reports whether t is one of the snapshot types.
func (t SnapshotType) Valid() bool {
	return t == SnapshotFilesystem || t == SnapshotMemory
}

// CheckpointRequest is the body of POST /v1/sandboxes/{sandbox}/checkpoint.
type CheckpointRequest struct {
	Type SnapshotType `json:"type,omitempty"` // "filesystem" (default) or "memory"
	Name string       `json:"name,omitempty"`
}

// Snapshot is a saved state of a sandbox.
type Snapshot struct {
	ID        string       `json:"id"`
	Type      SnapshotType `json:"type"`
	Name      string       `json:"name,omitempty"`
	SandboxID string       `json:"sandbox_id"`
	ParentID  string       `json:"parent_id,omitempty"`
	Image     string       `json:"image"`
	SizeBytes int64        `json:"size_bytes"`
	PausedMS  int64        `json:"paused_ms"`
	CreatedAt time.Time    `json:"created_at"`
}

// SnapshotList is the body of GET /v1/snapshots: one page of snapshots,
// newest first.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
	// NextCursor, when set, is the cursor of the next page (pass it as
	// ?cursor=); absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ForkRequest is the body of POST /v1/sandboxes/{sandbox}/fork.
type ForkRequest struct {
	Count int      `json:"count"`
	Names []string `json:"names,omitempty"`
	// Network gives the branches an egress policy; by default they keep
	// the source's.
	Network *NetworkPolicy `json:"network,omitempty"`
}

// ForkResult answers a fork: the memory snapshot and the new sandboxes.
type ForkResult struct {
	Snapshot  Snapshot  `json:"snapshot"`
	Sandboxes []Sandbox `json:"sandboxes"`
}

// CreatePoolRequest is the body of POST /v1/pools: keep Size sandboxes
// restored from SnapshotID (a golden snapshot) or started from Image, ready
// to hand out.
type CreatePoolRequest struct {
	Name       string `json:"name"`
	SnapshotID string `json:"snapshot_id,omitempty"`
	Image      string `json:"image,omitempty"`
	Size       int    `json:"size"`
}

// Pool is a warm pool of ready sandboxes.
type Pool struct {
	Name       string    `json:"name"`
	SnapshotID string    `json:"snapshot_id,omitempty"`
	Image      string    `json:"image"`
	Size       int       `json:"size"`
	Ready      int       `json:"ready"`
	CreatedAt  time.Time `json:"created_at"`
	// Members are the pool's sandboxes not handed out yet, on this node
	// (listed only when asked for: GET /v1/pools?members=true).
	Members []PoolMember `json:"members,omitempty"`
}

// PoolMember is a sandbox a pool keeps ready (or one it made that failed
// and has not been removed yet). Its id works with DELETE
// /v1/sandboxes/{sandbox}.
type PoolMember struct {
	ID        string       `json:"id"`
	State     SandboxState `json:"state"`
	CreatedAt time.Time    `json:"created_at"`
	// Node is the node that runs it (in a cluster).
	Node string `json:"node,omitempty"`
}

// PoolList is the body of GET /v1/pools.
type PoolList struct {
	Pools []Pool `json:"pools"`
}
