package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// Lists page by keyset: a page is the rows that follow, in the list's
// order, the last row of the page before it, whose keys the cursor carries.
// A row inserted while a client walks the pages lands at the head of the
// list (a newer created_at), before every cursor, so a walk never sees a
// row twice and never misses an older one; no offset shifts under it.

// Page asks for one page of a list.
type Page struct {
	// Limit caps the rows returned; 0 returns every row (the daemon's own
	// work; the API always sets one).
	Limit int
	// Cursor continues the list after the last row of the page that
	// returned it; "" starts at the head. Its list, order and keys must
	// decode (DecodeCursor), else errdefs.ErrInvalidArgument.
	Cursor string
	// Oldest lists oldest first instead of newest first (sandboxes only:
	// E2B's order=asc).
	Oldest bool
}

// The limits of a page the API accepts (GET …?limit=).
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// The lists a cursor can continue (Cursor.Kind).
const (
	CursorSandboxes     = "sandboxes"
	CursorSnapshots     = "snapshots"
	CursorConversations = "conversations"
	CursorAudit         = "audit"
	CursorImages        = "images"
)

// Cursor is what a cursor string carries: the list it continues, its
// order and the keys of the last row a page returned. It is opaque to
// clients, not secret: it names a row of the caller's own list, and every
// query it continues is scoped to the caller's tenant as any other, so a
// cursor (forged or not) never reaches another tenant's rows.
type Cursor struct {
	Kind string `json:"k"`
	// Oldest: the list is oldest first.
	Oldest bool `json:"o,omitempty"`
	// T is the row's first time key (created_at; a conversation's
	// updated_at), in nanoseconds; T2 a conversation's created_at.
	T  int64 `json:"t,omitempty"`
	T2 int64 `json:"u,omitempty"`
	// ID is the row's id (an image's name).
	ID string `json:"i,omitempty"`
	// N is an audit entry's id.
	N int64 `json:"n,omitempty"`
}

// cursorVersion is the version of the cursor format (field "v").
const cursorVersion = 1

// maxCursor bounds a cursor string, well above any this package makes.
const maxCursor = 1024

type cursorWire struct {
	V int `json:"v"`
	Cursor
}

// Encode returns c as a cursor string: base64url (unpadded) JSON.
func (c Cursor) Encode() string {
	b, err := json.Marshal(cursorWire{V: cursorVersion, Cursor: c})
	if err != nil { // a struct of strings, ints and bools always encodes
		panic(fmt.Sprintf("encode cursor: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor reads a cursor string that must continue a list of kind
// (with the order oldest asks for). Anything else (not base64url, not the
// JSON of a cursor, another list's or another order's cursor, keys out of
// range) is an errdefs.ErrInvalidArgument naming the field "cursor".
func DecodeCursor(s, kind string, oldest bool) (Cursor, error) {
	bad := func(why string) (Cursor, error) {
		return Cursor{}, errdefs.InvalidArgument("cursor: %s; pass the next_cursor of the page before, or none to start at the first page", why)
	}
	if len(s) > maxCursor {
		return bad("too long to be a cursor")
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return bad("not a cursor this server made")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var w cursorWire
	if err := dec.Decode(&w); err != nil || dec.More() {
		return bad("not a cursor this server made")
	}
	c := w.Cursor
	switch {
	case w.V != cursorVersion:
		return bad("not a cursor this server made")
	case c.Kind != kind:
		return bad(fmt.Sprintf("a cursor of another list (%.20q), not of %s", c.Kind, kind))
	case c.Oldest != oldest:
		return bad("a cursor of the list in the other order")
	case c.T < 0 || c.T2 < 0 || c.N < 0:
		return bad("keys out of range")
	case len(c.ID) > 256 || !utf8.ValidString(c.ID) || strings.ContainsRune(c.ID, 0):
		return bad("keys out of range")
	}
	switch kind {
	case CursorAudit:
		if c.N == 0 {
			return bad("keys out of range")
		}
	default:
		if c.ID == "" {
			return bad("keys out of range")
		}
	}
	return c, nil
}

// sqlQuery builds a statement's WHERE clause in either dialect: conditions
// are written with ? for each argument, which PostgreSQL's form numbers
// ($1, $2, …) as it adds them.
type sqlQuery struct {
	pg    bool
	where []string
	args  []any
}

func (q *sqlQuery) add(cond string, args ...any) {
	if q.pg {
		var b strings.Builder
		n := len(q.args)
		for _, r := range cond {
			if r == '?' {
				n++
				fmt.Fprintf(&b, "$%d", n)
				continue
			}
			b.WriteRune(r)
		}
		cond = b.String()
	}
	q.where = append(q.where, cond)
	q.args = append(q.args, args...)
}

// sql is the WHERE clause ("1=1" when there is no condition).
func (q *sqlQuery) sql() string {
	if len(q.where) == 0 {
		return "1=1"
	}
	return strings.Join(q.where, " AND ")
}

// placeholders returns n placeholders for an IN list, "?" each (add numbers
// them for PostgreSQL).
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// limitClause is the LIMIT of a page's query: one row more than the page,
// to know whether another page follows ("" for every row).
func limitClause(p Page) string {
	if p.Limit <= 0 {
		return ""
	}
	return fmt.Sprintf(" LIMIT %d", p.Limit+1)
}

// cutPage trims rows fetched with limitClause to the page and returns the
// cursor of its last row when more rows follow ("" on the last page).
func cutPage[T any](rows []T, p Page, cursorOf func(T) Cursor) ([]T, string) {
	if p.Limit <= 0 || len(rows) <= p.Limit {
		return rows, ""
	}
	rows = rows[:p.Limit]
	return rows, cursorOf(rows[len(rows)-1]).Encode()
}

// sandboxListQuery is the statement of one page of sandboxes: f's
// filters, the context's tenant, after p's cursor, newest (or oldest) first
// by (created_at, id).
func sandboxListQuery(pg bool, scope string, f ListFilter, p Page) (string, []any, error) {
	q := &sqlQuery{pg: pg}
	if f.State != "" {
		q.add("state = ?", f.State)
	}
	if len(f.States) > 0 {
		args := make([]any, len(f.States))
		for i, s := range f.States {
			args[i] = s
		}
		q.add("state IN ("+placeholders(len(args))+")", args...)
	}
	if f.HideTerminated {
		// Written as the live-rows index's predicate, so that it is used.
		q.add("state != 'terminated'")
	}
	if f.Name != "" {
		q.add("name = ?", f.Name)
	}
	if f.Tenant != "" {
		q.add("tenant = ?", f.Tenant)
	}
	if scope != "" {
		q.add("tenant = ?", scope)
	}
	if f.Node != "" {
		q.add("(node = ? OR node = '')", f.Node)
	}
	for _, k := range sortedKeys(f.Labels) {
		if pg {
			q.add("(spec::jsonb -> 'labels' ->> ?) = ?", k, f.Labels[k])
		} else {
			q.add("EXISTS (SELECT 1 FROM json_each(spec, '$.labels') WHERE key = ? AND value = ?)", k, f.Labels[k])
		}
	}
	order := " ORDER BY created_at DESC, id DESC"
	if p.Oldest {
		order = " ORDER BY created_at, id"
	}
	if p.Cursor != "" {
		c, err := DecodeCursor(p.Cursor, CursorSandboxes, p.Oldest)
		if err != nil {
			return "", nil, err
		}
		if p.Oldest {
			q.add("(created_at, id) > (?, ?)", c.T, c.ID)
		} else {
			q.add("(created_at, id) < (?, ?)", c.T, c.ID)
		}
	}
	return `SELECT ` + sandboxCols + ` FROM sandboxes WHERE ` + q.sql() + order + limitClause(p), q.args, nil
}

// SandboxCursor is the cursor that continues a list of sandboxes (newest
// first, or oldest first) after sb.
func SandboxCursor(sb *Sandbox, oldest bool) string {
	return Cursor{Kind: CursorSandboxes, Oldest: oldest, T: sb.CreatedAt.UnixNano(), ID: sb.ID}.Encode()
}

func sandboxCursor(p Page) func(*Sandbox) Cursor {
	return func(sb *Sandbox) Cursor {
		return Cursor{Kind: CursorSandboxes, Oldest: p.Oldest, T: sb.CreatedAt.UnixNano(), ID: sb.ID}
	}
}

// snapshotListQuery is the statement of one page of snapshots, newest
// first by (created_at, id).
func snapshotListQuery(pg bool, scope string, f SnapshotFilter, p Page) (string, []any, error) {
	if p.Oldest {
		return "", nil, errdefs.InvalidArgument("snapshots are listed newest first only")
	}
	q := &sqlQuery{pg: pg}
	if scope != "" {
		q.add("tenant = ?", scope)
	}
	if f.SandboxID != "" {
		q.add("sandbox_id = ?", f.SandboxID)
	}
	if f.ExcludeType != "" {
		q.add("type != ?", f.ExcludeType)
	}
	if f.Name != "" {
		q.add("name = ?", f.Name)
	}
	if p.Cursor != "" {
		c, err := DecodeCursor(p.Cursor, CursorSnapshots, false)
		if err != nil {
			return "", nil, err
		}
		q.add("(created_at, id) < (?, ?)", c.T, c.ID)
	}
	return `SELECT ` + snapshotCols + ` FROM snapshots WHERE ` + q.sql() + ` ORDER BY created_at DESC, id DESC` + limitClause(p), q.args, nil
}

func snapshotCursor(sn *Snapshot) Cursor {
	return Cursor{Kind: CursorSnapshots, T: sn.CreatedAt.UnixNano(), ID: sn.ID}
}

// conversationListQuery is the statement of one page of conversations, the
// most recently updated first by (updated_at, created_at, id).
func conversationListQuery(pg bool, scope string, p Page) (string, []any, error) {
	if p.Oldest {
		return "", nil, errdefs.InvalidArgument("conversations are listed the most recently updated first only")
	}
	q := &sqlQuery{pg: pg}
	if scope != "" {
		q.add("tenant = ?", scope)
	}
	if p.Cursor != "" {
		c, err := DecodeCursor(p.Cursor, CursorConversations, false)
		if err != nil {
			return "", nil, err
		}
		q.add("(updated_at, created_at, id) < (?, ?, ?)", c.T, c.T2, c.ID)
	}
	return `SELECT ` + conversationCols + ` FROM conversations WHERE ` + q.sql() +
		` ORDER BY updated_at DESC, created_at DESC, id DESC` + limitClause(p), q.args, nil
}

func conversationCursor(c *Conversation) Cursor {
	return Cursor{Kind: CursorConversations, T: c.UpdatedAt.UnixNano(), T2: c.CreatedAt.UnixNano(), ID: c.ID}
}

// auditListQuery is the statement of one page of the audit log, newest
// first by id: f's filters, below f.Before and after p's cursor.
func auditListQuery(pg bool, f AuditFilter, p Page) (string, []any, error) {
	if p.Oldest {
		return "", nil, errdefs.InvalidArgument("the audit log is listed newest first only")
	}
	q := &sqlQuery{pg: pg}
	for _, c := range []struct{ col, v string }{{"tenant", f.Tenant}, {"key_id", f.KeyID}, {"resource", f.Resource}} {
		if c.v != "" {
			q.add(c.col+" = ?", c.v)
		}
	}
	if f.Before > 0 {
		q.add("id < ?", f.Before)
	}
	if p.Cursor != "" {
		c, err := DecodeCursor(p.Cursor, CursorAudit, false)
		if err != nil {
			return "", nil, err
		}
		q.add("id < ?", c.N)
	}
	return `SELECT id, at, key_id, tenant, action, resource, status, outcome, request_id, via FROM audit
		WHERE ` + q.sql() + ` ORDER BY id DESC` + limitClause(p), q.args, nil
}

func auditCursor(e AuditEntry) Cursor { return Cursor{Kind: CursorAudit, N: e.ID} }

// auditPage is the page ListAudit returns for f: f.Limit entries (100 when
// unset) from the head of the list.
func auditPage(f AuditFilter) Page {
	if f.Limit <= 0 {
		return Page{Limit: DefaultPageLimit}
	}
	return Page{Limit: f.Limit}
}

// pruneBatch bounds the sandboxes PruneTerminated removes per transaction,
// so that it never holds the database's write lock for long.
const pruneBatch = 500

// prunableSandboxes selects (at most pruneBatch of) the ids of the
// sandboxes PruneTerminated removes: terminated before ? (a row from
// before terminated_at was kept counts from its last activity), and named
// by no snapshot (its source) and no conversation (its sandbox).
var prunableSandboxes = `SELECT id FROM sandboxes
	WHERE state = 'terminated' AND COALESCE(terminated_at, last_active_at) < ?
	AND NOT EXISTS (SELECT 1 FROM snapshots WHERE snapshots.sandbox_id = sandboxes.id)
	AND NOT EXISTS (SELECT 1 FROM conversations WHERE conversations.sandbox_id = sandboxes.id)
	LIMIT ` + fmt.Sprint(pruneBatch)

// sortedKeys returns m's keys in order (a statement's conditions, and so
// its text, are then the same for the same filter).
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// scanAudit reads a row of auditListQuery.
func scanAudit(r scanner) (AuditEntry, error) {
	var e AuditEntry
	var at int64
	if err := r.Scan(&e.ID, &at, &e.KeyID, &e.Tenant, &e.Action, &e.Resource, &e.Status, &e.Outcome, &e.RequestID, &e.Via); err != nil {
		return AuditEntry{}, err
	}
	e.At = time.Unix(0, at).UTC()
	return e, nil
}
