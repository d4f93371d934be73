// Package store keeps forkbox's metadata: sandboxes, their state and the
// history of their state changes, snapshots and pools (Store), and chat
// conversations, their turns and uploaded files (ConversationStore), API
// keys, quotas and the audit log (AccessStore), the cells sandboxes ran
// (CellStore) and the cluster's nodes (NodeStore). These are the interfaces
// the rest of the daemon uses; Backend bundles them. Two backends implement
// all of them: SQLite (sqlite*.go), embedded, for one daemon, and PostgreSQL
// (postgres*.go), shared by several daemons writing at once. Open picks one
// from a DSN. Both run the same conformance suite (storetest), PostgreSQL
// against a throwaway server (pgtest), and with several instances racing on
// one database.
//
// Tenants: every resource row belongs to a tenant. A context carrying a
// principal (package tenant) scopes every method to that principal's tenant:
// rows of other tenants are not found, not listed and not changed, and new
// rows are the context's tenant's. A context without one (the daemon's own
// work) sees every tenant; rows it creates take the record's Tenant.
//
// Every change is a transaction: Update reads a row, lets the caller mutate
// it, and writes it back together with an event row when the state changed,
// so a crash never leaves a state without its history or half a change.
// Read-modify-writes are serialised across processes too: SQLite's
// transactions take the database's write lock first (BEGIN IMMEDIATE);
// PostgreSQL's lock what they read (SELECT … FOR UPDATE, advisory locks).
package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/forkbox/forkbox/api"
)

// Sandbox is one sandbox's durable record.
type Sandbox struct {
	ID string
	// Tenant owns the sandbox (set by Create from the context).
	Tenant      string
	Name        string // "" for ephemeral sandboxes
	State       api.SandboxState
	StateReason string
	Image       string
	SnapshotID  string
	Spec        Spec
	// Runtime is the runtime's own record of where the sandbox lives on the
	// host (init PID, paths, network link). The store does not interpret it.
	Runtime json.RawMessage
	// SuspendImage is the snapshot holding a suspended sandbox's state (its
	// latest suspend); "" when it never was suspended.
	SuspendImage string
	// Node is the id of the daemon that runs the sandbox (or, while it is
	// suspended, the one that suspended it and has its image cached).
	// "" on a single daemon's rows from before nodes existed: the daemon
	// that reads them owns them.
	Node         string
	CreatedAt    time.Time
	LastActiveAt time.Time
	TerminatedAt *time.Time
}

// Spec is what the user asked for, with defaults filled in.
type Spec struct {
	CPUs                float64 `json:"cpus"`
	MemoryMB            int64   `json:"memory_mb"`
	DiskMB              int64   `json:"disk_mb"`
	PIDsLimit           int64   `json:"pids_limit"`
	TimeoutSecs         int64   `json:"timeout_secs"`
	MaxLifetimeSecs     int64   `json:"max_lifetime_secs,omitempty"`
	AllowInternetAccess bool    `json:"allow_internet_access"`
	// Network is the egress policy as the user gave it (nil: the default).
	Network *api.NetworkPolicy `json:"network,omitempty"`
	Env     map[string]string  `json:"env,omitempty"`
	Labels  map[string]string  `json:"labels,omitempty"`
	// NoAutoResume: calls that need the sandbox running answer 409 while it
	// is suspended instead of resuming it.
	NoAutoResume bool `json:"no_auto_resume,omitempty"`
	// UIDBase is the first host id of the lineage's user namespace range
	// (set when the lineage's first sandbox starts; restores keep it).
	UIDBase uint32 `json:"uid_base,omitempty"`
	// Ports are the access settings of the sandbox's exposed ports, by
	// port (made when first asked for; absent: API key only).
	Ports map[int]PortAccess `json:"ports,omitempty"`
	// SuspendOnIdle: suspended, not terminated, at its idle timeout even
	// without a name.
	SuspendOnIdle bool `json:"suspend_on_idle,omitempty"`
	// E2B holds the access tokens of the sandbox's E2B data plane (made
	// when an E2B client first creates or connects to it).
	E2B *E2BAccess `json:"e2b,omitempty"`
}

// E2BAccess are the tokens an E2B client sends to a sandbox's envd and
// code interpreter.
type E2BAccess struct {
	EnvdToken    string `json:"envd_token"`
	TrafficToken string `json:"traffic_token"`
	// Template is the templateID the client created it with.
	Template string `json:"template,omitempty"`
	// Contexts are the code contexts E2B clients' cells run in when they
	// name none, by language (made on first use, in /home/user).
	Contexts map[string]string `json:"contexts,omitempty"`
}

// PortAccess is who may reach one port of a sandbox through the daemon
// besides holders of an API key.
type PortAccess struct {
	// Token, sent by a client, lets it through (revoking makes a new one).
	Token string `json:"token"`
	// Public lets everyone through.
	Public bool `json:"public,omitempty"`
}

// Event records one state change.
type Event struct {
	ID        int64
	SandboxID string
	From, To  api.SandboxState
	Reason    string
	At        time.Time
}

// ListFilter narrows List. Empty fields match everything.
type ListFilter struct {
	// Tenant narrows to one tenant (for the daemon's own work; a request's
	// context narrows by itself).
	Tenant string
	State  api.SandboxState
	Name   string
	Labels map[string]string
	// Node narrows to the sandboxes of one node; rows with Node "" match
	// every node (they predate nodes).
	Node string
	// States narrows to the sandboxes in any of these states.
	States []api.SandboxState
	// HideTerminated leaves terminated sandboxes out (the API's default).
	HideTerminated bool
}

// SnapshotFilter narrows ListSnapshotsPage. Empty fields match everything.
type SnapshotFilter struct {
	// SandboxID narrows to the snapshots taken of one sandbox.
	SandboxID string
	// ExcludeType leaves the snapshots of one type out.
	ExcludeType api.SnapshotType
	// Name narrows to the snapshots of that name.
	Name string
}

// Snapshot is one snapshot's durable record. Its files live in the snapshot
// store (internal/snapshot); the record is written only after they are
// committed there, so a record always points at a complete snapshot.
type Snapshot struct {
	ID     string
	Tenant string
	Name   string
	// Type is filesystem or memory, or the type package sandbox marks
	// its suspend images with (not one of the API's).
	Type      api.SnapshotType
	SandboxID string // the sandbox it was taken from
	ParentID  string // the snapshot that sandbox was restored from, if any
	Image     string
	Spec      Spec // the source sandbox's spec (limits, env) at the time
	SizeBytes int64
	Checksum  string // sha256 of the snapshot's manifest
	PausedMS  int64  // how long the sandbox was paused to take it
	CreatedAt time.Time
}

// Pool is a warm pool's durable record; its ready sandboxes are ordinary
// sandbox rows carrying the PoolLabel.
type Pool struct {
	Tenant     string
	Name       string
	SnapshotID string
	Image      string
	Size       int
	CreatedAt  time.Time
}

// Store is the metadata store. Implementations are safe for concurrent use.
type Store interface {
	// Create inserts a new sandbox and its first event. A name already used by
	// a sandbox that is not terminated is an errdefs.ErrConflict.
	Create(ctx context.Context, sb *Sandbox) error
	// Get finds a sandbox by id, or else by name (the live one first, then the
	// most recently created). Missing: errdefs.ErrNotFound.
	Get(ctx context.Context, ref string) (*Sandbox, error)
	// List returns sandboxes, newest first.
	List(ctx context.Context, f ListFilter) ([]*Sandbox, error)
	// ListPage returns one page of the sandboxes that match f, newest
	// first (oldest first with p.Oldest) by (CreatedAt, ID), and the cursor
	// of the next page ("" on the last). A malformed cursor is
	// errdefs.ErrInvalidArgument.
	ListPage(ctx context.Context, f ListFilter, p Page) ([]*Sandbox, string, error)
	// PruneTerminated removes the sandboxes terminated before before, with
	// their events and cells, except those that a snapshot (taken of it)
	// or a conversation (its sandbox) names; it returns how many it
	// removed.
	PruneTerminated(ctx context.Context, before time.Time) (int64, error)
	// Update runs fn on the current row inside a transaction and stores the
	// result (all but ID and Tenant; CreatedAt moves when a warm pool's
	// sandbox is handed out); when fn changed State an event with fn's
	// StateReason is recorded. An error from fn aborts the change and is
	// returned as is.
	Update(ctx context.Context, id string, fn func(*Sandbox) error) (*Sandbox, error)
	// Touch sets last_active_at without an event (hot path, no read).
	Touch(ctx context.Context, id string, at time.Time) error
	// Events lists a sandbox's state changes, oldest first.
	Events(ctx context.Context, id string) ([]Event, error)

	// CreateSnapshot records a committed snapshot.
	CreateSnapshot(ctx context.Context, s *Snapshot) error
	// GetSnapshot finds a snapshot by id. Missing: errdefs.ErrNotFound.
	GetSnapshot(ctx context.Context, id string) (*Snapshot, error)
	// ListSnapshots returns snapshots, newest first; sandboxID "" means all.
	ListSnapshots(ctx context.Context, sandboxID string) ([]*Snapshot, error)
	// ListSnapshotsPage returns one page of the snapshots that match f,
	// newest first by (CreatedAt, ID), and the cursor of the next page (""
	// on the last).
	ListSnapshotsPage(ctx context.Context, f SnapshotFilter, p Page) ([]*Snapshot, string, error)
	// DeleteSnapshot removes a snapshot's record. Missing: errdefs.ErrNotFound.
	DeleteSnapshot(ctx context.Context, id string) error

	// CreatePool records a pool; a name its tenant already uses is
	// errdefs.ErrConflict.
	CreatePool(ctx context.Context, p *Pool) error
	// ListPools returns every pool, by tenant and name.
	ListPools(ctx context.Context) ([]*Pool, error)
	// DeletePool removes tenant owner's pool name. Missing:
	// errdefs.ErrNotFound.
	DeletePool(ctx context.Context, owner, name string) error
	Close() error
}

// Node is one daemon of a cluster that shares a store: what the others need
// to send it calls (Address) and to place sandboxes on it (capacity).
type Node struct {
	ID string
	// Address is the base URL other nodes reach its API at
	// (http://10.0.0.2:8080).
	Address string
	// CPUs, MemoryBytes and DiskBytes are what the node gives sandboxes in
	// all; DiskFreeBytes what its sandboxes' disk has free.
	CPUs          float64
	MemoryBytes   int64
	DiskBytes     int64
	DiskFreeBytes int64
	// Running counts its running sandboxes; MemoryReserved adds up their
	// memory limits.
	Running        int
	MemoryReserved int64
	StartedAt      time.Time
	HeartbeatAt    time.Time
}

// NodeStore keeps the cluster's nodes. Both backends implement it; on
// SQLite the only node is the daemon itself.
type NodeStore interface {
	// Heartbeat inserts node n or replaces its row (every field as given).
	Heartbeat(ctx context.Context, n *Node) error
	// GetNode finds a node. Missing: errdefs.ErrNotFound.
	GetNode(ctx context.Context, id string) (*Node, error)
	// ListNodes returns every node, by id.
	ListNodes(ctx context.Context) ([]*Node, error)
	// DeleteNode removes a node's row. Missing: errdefs.ErrNotFound.
	DeleteNode(ctx context.Context, id string) error
}

// Backend is everything a daemon keeps in its metadata store: SQLite
// (embedded, one daemon) and PostgreSQL (shared by many) implement it.
type Backend interface {
	Store
	AccessStore
	ConversationStore
	CellStore
	NodeStore
	// Kind is "sqlite" or "postgres".
	Kind() string
}

// Key is an API key's durable record: only the SHA-256 of its secret is
// kept.
type Key struct {
	ID        string
	Hash      string // hex SHA-256 of the secret
	Tenant    string
	Role      api.Role
	Name      string
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
}

// AuditEntry is one audited call (api.AuditEntry).
type AuditEntry = api.AuditEntry

// AuditFilter narrows ListAudit; empty fields match everything.
type AuditFilter struct {
	Tenant, KeyID, Resource string
	// Before, when not 0, lists entries with a smaller id (paging).
	Before int64
	// Limit caps the entries ListAudit returns (100 when 0).
	Limit int
}

// AccessStore keeps API keys, tenants' quotas and the audit log. Both
// backends implement it. It is not scoped by the context's tenant: only admin
// calls reach it for other tenants.
type AccessStore interface {
	// CreateKey records a key; a duplicate id or hash is errdefs.ErrConflict.
	CreateKey(ctx context.Context, k *Key) error
	// KeyByHash finds the key whose secret hashes to hash (revoked and
	// expired ones too: the caller decides). Missing: errdefs.ErrNotFound.
	KeyByHash(ctx context.Context, hash string) (*Key, error)
	// ListKeys lists keys, oldest first; tenant "" lists all.
	ListKeys(ctx context.Context, tenant string) ([]*Key, error)
	// RevokeKey sets a key's RevokedAt (kept if already set) and returns
	// it. Missing: errdefs.ErrNotFound.
	RevokeKey(ctx context.Context, id string, at time.Time) (*Key, error)

	// SetQuotas stores a tenant's quotas (creating the tenant's row).
	SetQuotas(ctx context.Context, tenant string, q api.Quotas) error
	// Quotas returns a tenant's quotas: none set is all unlimited.
	Quotas(ctx context.Context, tenant string) (api.Quotas, error)
	// Tenants lists the tenants that have keys or quotas, by name.
	Tenants(ctx context.Context) ([]string, error)

	// AppendAudit records entries in one transaction (their ID is
	// assigned).
	AppendAudit(ctx context.Context, entries []AuditEntry) error
	// ListAudit returns entries, newest first.
	ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, error)
	// ListAuditPage returns one page of the entries that match f (f.Limit
	// aside: p.Limit caps the page), newest first, and the cursor of the
	// next page ("" on the last).
	ListAuditPage(ctx context.Context, f AuditFilter, p Page) ([]AuditEntry, string, error)
	// PruneAudit removes entries older than before; it returns how many.
	PruneAudit(ctx context.Context, before time.Time) (int64, error)
}

// Conversation is a chat conversation's durable record (api.Conversation
// without its turns and files). Each owns a named sandbox.
type Conversation struct {
	ID          string
	Tenant      string
	Title       string
	SandboxID   string
	SandboxName string
	Model       string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Turn is one question of a conversation and its answer.
type Turn struct {
	ConversationID string
	// Seq numbers a conversation's turns from 1; AppendTurn assigns it.
	Seq int
	// Turn is the api.ChatTurn as JSON; the store does not interpret it.
	Turn json.RawMessage
	// Messages is the model history of this turn (the provider messages it
	// added), as JSON; the store does not interpret it.
	Messages  json.RawMessage
	CreatedAt time.Time
}

// Upload is an uploaded file's durable record; its bytes live elsewhere.
type Upload struct {
	ID        string
	Tenant    string
	Name      string
	SizeBytes int64
	SHA256    string
	Columns   []string // the CSV's header fields
	Rows      int64    // the CSV's data rows
	// ConversationID is the conversation the file was given to; "" for none.
	ConversationID string
	CreatedAt      time.Time
}

// ConversationStore keeps chat conversations, their turns and uploaded
// files. It is separate from Store so that Store's fakes need not grow;
// both backends implement both. Implementations are safe for concurrent use.
type ConversationStore interface {
	// CreateConversation inserts a conversation; an id already used is
	// errdefs.ErrConflict.
	CreateConversation(ctx context.Context, c *Conversation) error
	// GetConversation finds a conversation by id. Missing: errdefs.ErrNotFound.
	GetConversation(ctx context.Context, id string) (*Conversation, error)
	// ListConversations returns every conversation, the most recently
	// updated first.
	ListConversations(ctx context.Context) ([]*Conversation, error)
	// ListConversationsPage returns one page of the conversations, the most
	// recently updated first by (UpdatedAt, CreatedAt, ID), and the cursor
	// of the next page ("" on the last). A conversation updated while a
	// client walks the pages moves to the head of the list.
	ListConversationsPage(ctx context.Context, p Page) ([]*Conversation, string, error)
	// UpdateConversation writes c's Title, SandboxID, SandboxName, Model and
	// UpdatedAt (CreatedAt is kept). Missing: errdefs.ErrNotFound.
	UpdateConversation(ctx context.Context, c *Conversation) error
	// DeleteConversation removes a conversation and its turns, and detaches
	// its uploads (their ConversationID becomes ""). Missing:
	// errdefs.ErrNotFound.
	DeleteConversation(ctx context.Context, id string) error
	// AppendTurn adds t to the end of conversation t.ConversationID: it sets
	// t.Seq to the last turn's Seq plus one (1 for the first turn) and moves
	// the conversation's UpdatedAt forward to t.CreatedAt (a zero CreatedAt
	// is set to now first). An unknown conversation is errdefs.ErrNotFound;
	// Turn or Messages that are not valid JSON (when not empty) are
	// errdefs.ErrInvalidArgument.
	AppendTurn(ctx context.Context, t *Turn) error
	// ListTurns returns a conversation's turns by Seq (none for an unknown
	// conversation).
	ListTurns(ctx context.Context, conversationID string) ([]*Turn, error)

	// CreateUpload records an uploaded file; an id already used is
	// errdefs.ErrConflict, a ConversationID that names no conversation
	// errdefs.ErrNotFound.
	CreateUpload(ctx context.Context, u *Upload) error
	// GetUpload finds an upload by id. Missing: errdefs.ErrNotFound.
	GetUpload(ctx context.Context, id string) (*Upload, error)
	// ListUploads returns a conversation's uploads, oldest first;
	// conversationID "" lists every upload.
	ListUploads(ctx context.Context, conversationID string) ([]*Upload, error)
	// SetUploadConversation gives upload id to a conversation ("" detaches
	// it). An unknown upload or conversation is errdefs.ErrNotFound.
	SetUploadConversation(ctx context.Context, id, conversationID string) error
}

// Cell is one run of code in a sandbox, as recorded: the sandbox's cell
// history is its notebook.
type Cell struct {
	ID        string
	Tenant    string
	SandboxID string
	// Seq numbers a sandbox's cells from 1; AppendCells assigns it.
	Seq int
	// Source is who ran it: "user" (the API) or "model" (the chat's model).
	Source   api.CellSource
	Language string
	Code     string
	// Execution is the api.Execution as JSON; the store does not interpret it.
	Execution json.RawMessage
	CreatedAt time.Time
}

// MaxCellsPerSandbox is how many cells a sandbox's history keeps: older ones
// are dropped as new ones come.
const MaxCellsPerSandbox = 1000

// CellStore keeps the cells sandboxes ran. Both backends implement it.
type CellStore interface {
	// AppendCells records cells (their Tenant as set, not the context's: the
	// writer is batched) in one transaction, giving each the next Seq of its
	// sandbox and dropping a sandbox's cells beyond MaxCellsPerSandbox,
	// oldest first.
	AppendCells(ctx context.Context, cells []Cell) error
	// ListCells returns a sandbox's cells by Seq, of the context's tenant
	// (none for an unknown sandbox).
	ListCells(ctx context.Context, sandboxID string) ([]*Cell, error)
}
