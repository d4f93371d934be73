package api

import "time"

// Access: API keys belong to tenants; every resource belongs to the tenant
// whose key made it. Another tenant's resources answer 404, as if they did
// not exist.

// Role is what an API key may do (Key.Role).
type Role string

// Key roles. An admin key manages keys, tenants' quotas and reads the audit
// log (of every tenant); a user key works with its tenant's resources only.
const (
	RoleAdmin Role = "admin"
	RoleUser  Role = "user"
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool {
	return r == RoleAdmin || r == RoleUser
}

// DefaultTenant owns what was made with the daemon's own key (or with no key
// at all, on loopback), and its images are the catalog every tenant may use.
const DefaultTenant = "default"

// Key is an API key's record. The secret itself is shown once, in the answer
// to its creation; the daemon keeps only its hash.
type Key struct {
	// ID names the key in listings, the audit log and revocation.
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Role   Role   `json:"role"`
	// Name is a note of the creator's ("ci", "alice's laptop").
	Name      string     `json:"name,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// Secret is the bearer token; present only when the key was just made.
	Secret string `json:"secret,omitempty"`
}

// CreateKeyRequest is the body of POST /v1/keys.
type CreateKeyRequest struct {
	Tenant string `json:"tenant"`
	// Role is "user" (default) or "admin".
	Role Role   `json:"role,omitempty"`
	Name string `json:"name,omitempty"`
	// ExpiresAt, or ExpiresIn (a Go duration such as "720h"), ends the key;
	// neither: it lasts until revoked.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	ExpiresIn string     `json:"expires_in,omitempty"`
	// Quotas, when given, become the tenant's quotas (as PUT
	// /v1/tenants/{tenant} would set them).
	Quotas *Quotas `json:"quotas,omitempty"`
}

// KeyList is the body of GET /v1/keys.
type KeyList struct {
	Keys []Key `json:"keys"`
}

// Quotas bound what one tenant may hold at once. A nil field is unlimited.
type Quotas struct {
	// RunningSandboxes counts sandboxes that are running (or starting).
	RunningSandboxes *int64 `json:"running_sandboxes,omitempty"`
	// MemoryMB and CPUs sum the limits of the running sandboxes.
	MemoryMB *int64   `json:"memory_mb,omitempty"`
	CPUs     *float64 `json:"cpus,omitempty"`
	// SuspendedSandboxes counts suspended sessions.
	SuspendedSandboxes *int64 `json:"suspended_sandboxes,omitempty"`
	// SnapshotBytes sums the tenant's snapshots (checkpoints and suspend
	// images).
	SnapshotBytes *int64 `json:"snapshot_bytes,omitempty"`
	// ImageBytes sums the layers of the images the tenant built or
	// imported, each once; the shared catalog's layers they sit on are not
	// counted.
	ImageBytes *int64 `json:"image_bytes,omitempty"`
}

// QuotaName names one of a tenant's quotas (QuotaExceeded.Quota): the JSON
// name of its field of Quotas.
type QuotaName string

// Quota names, as they appear in QuotaExceeded and /metrics.
const (
	QuotaRunningSandboxes   QuotaName = "running_sandboxes"
	QuotaMemoryMB           QuotaName = "memory_mb"
	QuotaCPUs               QuotaName = "cpus"
	QuotaSuspendedSandboxes QuotaName = "suspended_sandboxes"
	QuotaSnapshotBytes      QuotaName = "snapshot_bytes"
	QuotaImageBytes         QuotaName = "image_bytes"
)

// TenantUsage is what a tenant holds now, against its quotas.
type TenantUsage struct {
	Tenant             string  `json:"tenant"`
	RunningSandboxes   int64   `json:"running_sandboxes"`
	MemoryMB           int64   `json:"memory_mb"`
	CPUs               float64 `json:"cpus"`
	SuspendedSandboxes int64   `json:"suspended_sandboxes"`
	SnapshotBytes      int64   `json:"snapshot_bytes"`
	ImageBytes         int64   `json:"image_bytes"`
	Quotas             Quotas  `json:"quotas"`
}

// Tenant is a tenant's settings (PUT /v1/tenants/{tenant}; GET answers with
// its usage too).
type Tenant struct {
	Name   string       `json:"name"`
	Quotas Quotas       `json:"quotas"`
	Usage  *TenantUsage `json:"usage,omitempty"`
}

// TenantList is the body of GET /v1/tenants.
type TenantList struct {
	Tenants []Tenant `json:"tenants"`
}

// QuotaExceeded is carried by a 429 error: which quota, what the tenant
// holds, what it asked for on top and the limit.
type QuotaExceeded struct {
	Quota     QuotaName `json:"quota"`
	Use       float64   `json:"use"`
	Requested float64   `json:"requested"`
	Limit     float64   `json:"limit"`
}

// AuditEntry is one call that changed something (or tried to): who, what,
// to which resource, when and how it ended.
type AuditEntry struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// KeyID is the key that made the call: "admin" for the daemon's own
	// key, "" with no key configured.
	KeyID  string `json:"key_id"`
	Tenant string `json:"tenant"`
	// Action is the route: "POST /v1/sandboxes/{sandbox}/exec".
	Action string `json:"action"`
	// Resource is the path's resource reference (a sandbox id or name, a
	// snapshot id, ...) or "" when the call names none.
	Resource string `json:"resource,omitempty"`
	// Status is the HTTP status of the answer; Outcome "ok" or the error
	// code.
	Status    int    `json:"status"`
	Outcome   string `json:"outcome"`
	RequestID string `json:"request_id,omitempty"`
	// Via is "mcp" for calls an MCP tool made, "" otherwise.
	Via string `json:"via,omitempty"`
}

// AuditList is the body of GET /v1/audit: one page of entries, newest
// first.
type AuditList struct {
	Entries []AuditEntry `json:"entries"`
	// NextCursor, when set, is the cursor of the next page (pass it as
	// ?cursor=); absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}
