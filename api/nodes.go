package api

import "time"

// NodeState says whether a node of a cluster answers (Node.State).
type NodeState string

// Node states.
const (
	NodeUp   NodeState = "up"
	NodeDown NodeState = "down"
)

// Node is one daemon of a cluster (GET /v1/nodes): daemons that share a
// PostgreSQL store and an S3 bucket. A single daemon lists none.
type Node struct {
	ID string `json:"id"`
	// Address is the base URL the other nodes reach its API at.
	Address string `json:"address"`
	// State is up while its heartbeat is recent, else down.
	State NodeState `json:"state"`
	// Self marks the node that answered.
	Self                bool      `json:"self,omitempty"`
	CPUs                float64   `json:"cpus"`
	MemoryBytes         int64     `json:"memory_bytes"`
	DiskBytes           int64     `json:"disk_bytes"`
	DiskFreeBytes       int64     `json:"disk_free_bytes"`
	Running             int       `json:"running"`
	MemoryReservedBytes int64     `json:"memory_reserved_bytes"`
	StartedAt           time.Time `json:"started_at"`
	HeartbeatAt         time.Time `json:"heartbeat_at"`
}

// NodeList is the body of GET /v1/nodes.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}
