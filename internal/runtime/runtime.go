// Package runtime isolates sandboxes on a Linux host: namespaces (mount, PID,
// network, IPC, UTS, cgroup), cgroup limits (v1 and v2), an ext4 writable
// layer under an overlay over the read-only image, pivot_root, and the
// forkbox agent as each sandbox's init.
//
// Lifecycle: Create prepares everything in order, registering the undo of each
// step on a cleanup stack so that a failure at any step unwinds the earlier
// ones; it returns once the agent inside answers. Info, the record of where
// the sandbox lives on the host, is persisted by the caller; after a daemon
// restart Adopt re-attaches to a sandbox that is still running. Destroy is
// idempotent and leaves no process, mount, loop device, cgroup or veth.
//
// Host layout of a sandbox (<dir> = <data>/sandboxes/<id>):
//
//	<dir>/disk.img   sparse ext4 image of disk_mb (the writable layer's quota)
//	<dir>/disk/      its mount: upper/ and work/ of the overlay, and run/
//	<dir>/disk/run/  bind-mounted at /.forkbox/run inside: agent.json, agent.sock
//	<dir>/lower/<i>  the image's layers, idmapped with the sandbox's id range
//	                 (detached once the overlay holds them)
//	<dir>/binds/<i>  idmapped clones of the image's read-only host binds
//	<dir>/rootfs/    the overlay: lower/* + disk/upper, mounted with paths
//	                 relative to <dir> so that none of the host's show inside
//
// Every sandbox runs in a user namespace of its own (see userns_linux.go):
// its root is an unprivileged host id of a range that package userns
// allocates, never host root.
package runtime

import (
	"encoding/json"
	"time"

	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/netsetup"
)

// Limits are a sandbox's cgroup limits.
type Limits struct {
	CPUs     float64
	MemoryMB int64
	PIDs     int64
	// NoFile is the RLIMIT_NOFILE (soft and hard) of the sandbox's init,
	// which every process of the sandbox inherits; 0 leaves the inherited
	// limit. The sandbox package derives it from the host's file-max and
	// PIDs so that PIDs × NoFile open files stay within the sandbox's share
	// of the host's file table (sandbox.HostBounds.NoFile).
	NoFile int64
}

// Spec is everything Create needs.
type Spec struct {
	ID            string
	Hostname      string
	Image         *image.Image
	Limits        Limits
	DiskMB        int64
	AllowInternet bool
	// Egress is the egress policy of a sandbox with internet access.
	Egress netsetup.Policy
	Env    []string // KEY=VALUE added to the image's env for every process
	// FromFS, when set, is a tar of a writable layer (ExportFS) that the new
	// sandbox starts with: a cold boot from a filesystem snapshot.
	FromFS string
	// UIDBase is the first host id of the sandbox's id range: that of its
	// lineage for a restore (the snapshot's processes and files carry those
	// host ids), 0 for a new sandbox, which gets a new range.
	UIDBase uint32
	// FromFSBase is the first host id of the range FromFS was written in
	// (0 for archives from before user namespaces, whose ids are
	// canonical); its owners are shifted into UIDBase's range when they
	// differ.
	FromFSBase uint32
	// Build makes a build sandbox: its agent keeps the build capabilities
	// (internal/harden.BuildCaps) so that image builds can run commands as
	// root (wire.ExecRequest.Root). Never set for users' sandboxes.
	Build bool
}

// Info is where a sandbox lives on the host. The caller persists it (as JSON)
// so that a restarted daemon can adopt or clean up the sandbox.
type Info struct {
	Dir       string         `json:"dir"`
	PID       int            `json:"pid"`
	PIDStart  uint64         `json:"pid_start"` // start time in clock ticks, guards against PID reuse
	CgroupDir string         `json:"cgroup_parent"`
	Link      *netsetup.Link `json:"link,omitempty"`
	// UIDBase is the first host id of the sandbox's user namespace range
	// (0: a sandbox from before user namespaces).
	UIDBase uint32 `json:"uid_base,omitempty"`
	// RunDir is the host path of the agent's run dir (empty: <Dir>/run,
	// where sandboxes from before it moved onto their disk have it).
	RunDir string `json:"run_dir,omitempty"`
	// LazyRestore is set by RestoreMemory when the memory came back
	// through lazy pages (copied in while the sandbox started) rather
	// than by CRIU's restorer. Not stored.
	LazyRestore bool `json:"-"`
}

// MarshalInfo encodes info for the metadata store.
func MarshalInfo(i *Info) json.RawMessage {
	b, _ := json.Marshal(i)
	return b
}

// UnmarshalInfo decodes what MarshalInfo wrote; an empty record is a zero Info.
func UnmarshalInfo(b json.RawMessage) (*Info, error) {
	var i Info
	if len(b) == 0 {
		return &i, nil
	}
	err := json.Unmarshal(b, &i)
	return &i, err
}

// Usage is a sandbox's resource use, read from its cgroup.
type Usage struct {
	CPUSeconds      float64
	MemoryBytes     int64
	MemoryPeakBytes int64
	PIDs            int64
	OOMKills        int64
	DiskUsedBytes   int64
}

// startTimeout bounds how long Create waits for the agent to come up.
const startTimeout = 20 * time.Second

// Recovered says what Recover found in a sandbox that a previous daemon
// process left, and undid.
type Recovered struct {
	// Frozen: its cgroup was frozen (a checkpoint, fork or suspend that
	// daemon did not finish had paused it) and is thawed now.
	Frozen bool
	// Tracers are processes that were still tracing the sandbox's
	// processes (a CRIU dump cut short); each was waited for, and killed
	// if it outlived the wait.
	Tracers []int
}
