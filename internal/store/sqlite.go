package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/tenant"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// migrations are applied in order, each in its own transaction; the index of
// a statement plus one is its schema version. Never edit a shipped entry:
// append a new one.
var migrations = []string{
	// 1: sandboxes and their state history.
	`CREATE TABLE sandboxes (
		id             TEXT PRIMARY KEY,
		name           TEXT NOT NULL DEFAULT '',
		state          TEXT NOT NULL,
		state_reason   TEXT NOT NULL DEFAULT '',
		image          TEXT NOT NULL DEFAULT '',
		snapshot_id    TEXT NOT NULL DEFAULT '',
		spec           TEXT NOT NULL,
		runtime        TEXT NOT NULL DEFAULT '{}',
		created_at     INTEGER NOT NULL,
		last_active_at INTEGER NOT NULL,
		terminated_at  INTEGER
	);
	CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(name)
		WHERE name != '' AND state != 'terminated';
	CREATE INDEX sandboxes_state ON sandboxes(state);
	CREATE TABLE sandbox_events (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
		from_state TEXT NOT NULL,
		to_state   TEXT NOT NULL,
		reason     TEXT NOT NULL DEFAULT '',
		at         INTEGER NOT NULL
	);
	CREATE INDEX sandbox_events_sandbox ON sandbox_events(sandbox_id, id);`,
	// 2: lookups by name (Get's "id or name") use an index for every state.
	`CREATE INDEX sandboxes_name ON sandboxes(name);`,
	// 3: snapshots (the files are in the snapshot store).
	`CREATE TABLE snapshots (
		id          TEXT PRIMARY KEY,
		name        TEXT NOT NULL DEFAULT '',
		type        TEXT NOT NULL,
		sandbox_id  TEXT NOT NULL DEFAULT '',
		parent_id   TEXT NOT NULL DEFAULT '',
		image       TEXT NOT NULL DEFAULT '',
		spec        TEXT NOT NULL,
		size_bytes  INTEGER NOT NULL DEFAULT 0,
		checksum    TEXT NOT NULL DEFAULT '',
		paused_ms   INTEGER NOT NULL DEFAULT 0,
		created_at  INTEGER NOT NULL
	);
	CREATE INDEX snapshots_sandbox ON snapshots(sandbox_id, created_at);`,
	// 4: the latest suspend image of a suspended sandbox.
	`ALTER TABLE sandboxes ADD COLUMN suspend_image TEXT NOT NULL DEFAULT '';`,
	// 5: warm pools.
	`CREATE TABLE pools (
		name        TEXT PRIMARY KEY,
		snapshot_id TEXT NOT NULL DEFAULT '',
		image       TEXT NOT NULL DEFAULT '',
		size        INTEGER NOT NULL,
		created_at  INTEGER NOT NULL
	);`,
	// 6: chat conversations, their turns, and uploaded files.
	`CREATE TABLE conversations (
		id           TEXT PRIMARY KEY,
		title        TEXT NOT NULL DEFAULT '',
		sandbox_id   TEXT NOT NULL DEFAULT '',
		sandbox_name TEXT NOT NULL DEFAULT '',
		model        TEXT NOT NULL DEFAULT '',
		created_at   INTEGER NOT NULL,
		updated_at   INTEGER NOT NULL
	);
	CREATE INDEX conversations_updated ON conversations(updated_at);
	CREATE TABLE conversation_turns (
		conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
		seq             INTEGER NOT NULL,
		turn            TEXT NOT NULL DEFAULT '',
		messages        TEXT NOT NULL DEFAULT '',
		created_at      INTEGER NOT NULL,
		PRIMARY KEY (conversation_id, seq)
	);
	CREATE TABLE uploads (
		id              TEXT PRIMARY KEY,
		name            TEXT NOT NULL,
		size_bytes      INTEGER NOT NULL DEFAULT 0,
		sha256          TEXT NOT NULL DEFAULT '',
		header          TEXT NOT NULL DEFAULT 'null',
		row_count       INTEGER NOT NULL DEFAULT 0,
		conversation_id TEXT NOT NULL DEFAULT '',
		created_at      INTEGER NOT NULL
	);
	CREATE INDEX uploads_conversation ON uploads(conversation_id, created_at);`,
	// 7: tenants. Every resource row says whose it is (rows made before
	// tenants existed are the default tenant's); names are unique per
	// tenant; API keys (hashed), tenants' quotas and the audit log.
	`ALTER TABLE sandboxes ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
	DROP INDEX sandboxes_live_name;
	CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(tenant, name)
		WHERE name != '' AND state != 'terminated';
	DROP INDEX sandboxes_name;
	CREATE INDEX sandboxes_name ON sandboxes(name, tenant);
	ALTER TABLE snapshots ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
	CREATE TABLE pools_t (
		tenant      TEXT NOT NULL DEFAULT 'default',
		name        TEXT NOT NULL,
		snapshot_id TEXT NOT NULL DEFAULT '',
		image       TEXT NOT NULL DEFAULT '',
		size        INTEGER NOT NULL,
		created_at  INTEGER NOT NULL,
		PRIMARY KEY (tenant, name)
	);
	INSERT INTO pools_t(tenant, name, snapshot_id, image, size, created_at)
		SELECT 'default', name, snapshot_id, image, size, created_at FROM pools;
	DROP TABLE pools;
	ALTER TABLE pools_t RENAME TO pools;
	ALTER TABLE conversations ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
	ALTER TABLE uploads ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
	CREATE TABLE api_keys (
		id          TEXT PRIMARY KEY,
		hash        TEXT NOT NULL UNIQUE,
		tenant      TEXT NOT NULL,
		role        TEXT NOT NULL,
		name        TEXT NOT NULL DEFAULT '',
		created_at  INTEGER NOT NULL,
		expires_at  INTEGER,
		revoked_at  INTEGER
	);
	CREATE INDEX api_keys_tenant ON api_keys(tenant);
	CREATE TABLE tenants (
		name       TEXT PRIMARY KEY,
		quotas     TEXT NOT NULL DEFAULT '{}',
		updated_at INTEGER NOT NULL
	);
	CREATE TABLE audit (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		at         INTEGER NOT NULL,
		key_id     TEXT NOT NULL DEFAULT '',
		tenant     TEXT NOT NULL DEFAULT '',
		action     TEXT NOT NULL,
		resource   TEXT NOT NULL DEFAULT '',
		status     INTEGER NOT NULL,
		outcome    TEXT NOT NULL DEFAULT '',
		request_id TEXT NOT NULL DEFAULT '',
		via        TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX audit_tenant ON audit(tenant, id);
	CREATE INDEX audit_at ON audit(at);`,
	// 8: cells, the history of the code each sandbox ran (its notebook).
	`CREATE TABLE cells (
		id         TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL DEFAULT 'default',
		sandbox_id TEXT NOT NULL,
		seq        INTEGER NOT NULL,
		source     TEXT NOT NULL,
		language   TEXT NOT NULL DEFAULT '',
		code       TEXT NOT NULL,
		execution  TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		UNIQUE (sandbox_id, seq)
	);`,
	// 9: nodes. A sandbox names the daemon that runs it ('' on rows from
	// before nodes: every node's), and every daemon keeps its own row.
	`ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';
	CREATE INDEX sandboxes_node ON sandboxes(node);
	CREATE TABLE nodes (
		id              TEXT PRIMARY KEY,
		address         TEXT NOT NULL DEFAULT '',
		cpus            REAL NOT NULL DEFAULT 0,
		memory_bytes    INTEGER NOT NULL DEFAULT 0,
		disk_bytes      INTEGER NOT NULL DEFAULT 0,
		disk_free_bytes INTEGER NOT NULL DEFAULT 0,
		running         INTEGER NOT NULL DEFAULT 0,
		memory_reserved INTEGER NOT NULL DEFAULT 0,
		started_at      INTEGER NOT NULL,
		heartbeat_at    INTEGER NOT NULL
	);`,
	// 10: lists page by keyset, newest first (page.go): a tenant's
	// sandboxes, all of them and the live ones alone (the API's default
	// list skips no terminated rows to fill a page), its snapshots and
	// its conversations in their lists' orders; the conversations by
	// sandbox, for PruneTerminated.
	`CREATE INDEX sandboxes_tenant_created ON sandboxes(tenant, created_at, id);
	CREATE INDEX sandboxes_tenant_live ON sandboxes(tenant, created_at, id) WHERE state != 'terminated';
	CREATE INDEX snapshots_tenant_created ON snapshots(tenant, created_at, id);
	CREATE INDEX conversations_tenant_updated ON conversations(tenant, updated_at, created_at, id);
	CREATE INDEX conversations_sandbox ON conversations(sandbox_id);`,
}

// SQLite is the embedded Store: one database file in the data directory,
// WAL journal, synchronous=FULL so that an acknowledged write survives kill -9.
type SQLite struct {
	db *sql.DB
}

var (
	_ Store             = (*SQLite)(nil)
	_ ConversationStore = (*SQLite)(nil)
	_ CellStore         = (*SQLite)(nil)
	_ NodeStore         = (*SQLite)(nil)
	_ Backend           = (*SQLite)(nil)
)

// OpenSQLite opens (creating if needed) the database at path and migrates it
// to the latest schema.
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	q := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(1)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", sqliteURI(path)+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open metadata db %s: %w", path, err)
	}
	// One writer at a time is SQLite's model; a small pool lets reads overlap.
	db.SetMaxOpenConns(4)
	s := &SQLite{db: db}
	// Processes opening a fresh database at once race to switch it to WAL
	// and create its tables; SQLite answers the loser SQLITE_BUSY at once
	// (without waiting out busy_timeout) where waiting could deadlock, so
	// the loser tries again.
	for attempt := 0; ; attempt++ {
		err = s.migrate(ctx)
		if err == nil || !isBusy(err) || attempt == 50 {
			break
		}
		select {
		case <-ctx.Done():
			db.Close()
			return nil, ctx.Err()
		case <-time.After(time.Duration(10+attempt*10) * time.Millisecond):
		}
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// isBusy reports whether err is SQLite's "database is locked".
func isBusy(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "database is locked"))
}

// sqliteURI turns a file path into the SQLite URI filename that names it. In
// a URI '?' starts the query, '#' the fragment and '%' an escape, so a data
// directory containing any of them would otherwise open a different file
// without the pragmas; and "file://x" would make x an authority.
func sqliteURI(path string) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	if strings.HasPrefix(path, "/") {
		return "file://" + esc
	}
	return "file:" + esc
}

// SchemaVersion returns the version the database is at.
func (s *SQLite) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

func (s *SQLite) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	cur, err := s.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if cur > len(migrations) {
		return fmt.Errorf("metadata db is at schema %d, newer than this forkbox (%d): refusing to run", cur, len(migrations))
	}
	for v := cur + 1; v <= len(migrations); v++ {
		// BEGIN IMMEDIATE (_txlock) makes migrators take turns; another
		// process opening the same database may have applied v since cur
		// was read.
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		var applied bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS(SELECT 1 FROM schema_migrations WHERE version = ?)`, v).Scan(&applied); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if applied {
			tx.Rollback()
			continue
		}
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)`, v, time.Now().UnixNano()); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	return nil
}

// Close closes the database.
func (s *SQLite) Close() error { return s.db.Close() }

// Kind implements Backend.
func (s *SQLite) Kind() string { return "sqlite" }

const sandboxCols = `id, name, state, state_reason, image, snapshot_id, spec, runtime, created_at, last_active_at, terminated_at, suspend_image, tenant, node`

type scanner interface{ Scan(dest ...any) error }

func scanSandbox(r scanner) (*Sandbox, error) {
	var (
		sb              Sandbox
		spec, rt        string
		created, active int64
		terminated      sql.NullInt64
	)
	if err := r.Scan(&sb.ID, &sb.Name, &sb.State, &sb.StateReason, &sb.Image, &sb.SnapshotID, &spec, &rt, &created, &active, &terminated, &sb.SuspendImage, &sb.Tenant, &sb.Node); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(spec), &sb.Spec); err != nil {
		return nil, fmt.Errorf("sandbox %s: decode spec: %w", sb.ID, err)
	}
	sb.Runtime = json.RawMessage(rt)
	sb.CreatedAt = time.Unix(0, created).UTC()
	sb.LastActiveAt = time.Unix(0, active).UTC()
	if terminated.Valid {
		t := time.Unix(0, terminated.Int64).UTC()
		sb.TerminatedAt = &t
	}
	return &sb, nil
}

func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixNano()
}

func runtimeJSON(r json.RawMessage) string {
	if len(r) == 0 {
		return "{}"
	}
	return string(r)
}

func isUniqueViolation(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// Create implements Store.
func (s *SQLite) Create(ctx context.Context, sb *Sandbox) error {
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	sb.Tenant = ownerFor(ctx, sb.Tenant)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, `INSERT INTO sandboxes(`+sandboxCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		sb.ID, sb.Name, sb.State, sb.StateReason, sb.Image, sb.SnapshotID, string(spec), runtimeJSON(sb.Runtime),
		sb.CreatedAt.UnixNano(), sb.LastActiveAt.UnixNano(), nullTime(sb.TerminatedAt), sb.SuspendImage, sb.Tenant, sb.Node)
	if isUniqueViolation(err) {
		if sb.Name != "" {
			return errdefs.Conflict("a sandbox named %q already exists", sb.Name)
		}
		return errdefs.Conflict("sandbox %s already exists", sb.ID)
	}
	if err != nil {
		return fmt.Errorf("insert sandbox: %w", err)
	}
	if err := insertEvent(ctx, tx, sb.ID, "", sb.State, sb.StateReason, sb.CreatedAt); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func insertEvent(ctx context.Context, tx *sql.Tx, id string, from, to api.SandboxState, reason string, at time.Time) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO sandbox_events(sandbox_id, from_state, to_state, reason, at) VALUES (?,?,?,?,?)`,
		id, from, to, reason, at.UnixNano()); err != nil {
		return fmt.Errorf("insert event: %w", err)
	}
	return nil
}

// Get implements Store.
func (s *SQLite) Get(ctx context.Context, ref string) (*Sandbox, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes
		WHERE (id = ?1 OR (name = ?1 AND name != '')) AND (?2 = '' OR tenant = ?2)
		ORDER BY (id = ?1) DESC, (state != 'terminated') DESC, created_at DESC LIMIT 1`, ref, tenant.Of(ctx))
	sb, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("sandbox %q not found", ref)
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %q: %w", ref, err)
	}
	return sb, nil
}

// List implements Store.
func (s *SQLite) List(ctx context.Context, f ListFilter) ([]*Sandbox, error) {
	out, _, err := s.ListPage(ctx, f, Page{})
	return out, err
}

// ListPage implements Store.
func (s *SQLite) ListPage(ctx context.Context, f ListFilter, p Page) ([]*Sandbox, string, error) {
	query, args, err := sandboxListQuery(false, tenant.Of(ctx), f, p)
	if err != nil {
		return nil, "", err
	}
	out, err := sqliteRows(ctx, s.db, "list sandboxes", query, args, scanSandbox)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, p, sandboxCursor(p))
	return out, next, nil
}

// sqliteRows runs query and scans every row it returns.
func sqliteRows[T any](ctx context.Context, db *sql.DB, what, query string, args []any, scan func(scanner) (T, error)) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// PruneTerminated implements Store. It removes a batch at a time, each in
// its own transaction; a sandbox's cells go with it (its events by the
// foreign key's cascade, and explicitly).
func (s *SQLite) PruneTerminated(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		n, err := s.pruneBatch(ctx, before)
		total += n
		if err != nil || n < pruneBatch {
			return total, err
		}
	}
}

func (s *SQLite) pruneBatch(ctx context.Context, before time.Time) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("prune terminated sandboxes: begin: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `DELETE FROM sandboxes WHERE id IN (`+prunableSandboxes+`) RETURNING id`, before.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("prune terminated sandboxes: %w", err)
	}
	var ids []any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("prune terminated sandboxes: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("prune terminated sandboxes: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	in := placeholders(len(ids))
	if _, err := tx.ExecContext(ctx, `DELETE FROM sandbox_events WHERE sandbox_id IN (`+in+`)`, ids...); err != nil {
		return 0, fmt.Errorf("prune terminated sandboxes' events: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM cells WHERE sandbox_id IN (`+in+`)`, ids...); err != nil {
		return 0, fmt.Errorf("prune terminated sandboxes' cells: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("prune terminated sandboxes: commit: %w", err)
	}
	return int64(len(ids)), nil
}

// Update implements Store.
func (s *SQLite) Update(ctx context.Context, id string, fn func(*Sandbox) error) (*Sandbox, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	sb, err := scanSandbox(tx.QueryRowContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?1 AND (?2 = '' OR tenant = ?2)`, id, tenant.Of(ctx)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("sandbox %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("read sandbox %s: %w", id, err)
	}
	from, owner := sb.State, sb.Tenant
	if err := fn(sb); err != nil {
		return nil, err
	}
	// ID and Tenant are not written back: keep the returned record equal
	// to the stored one.
	sb.ID, sb.Tenant = id, owner
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	_, err = tx.ExecContext(ctx, `UPDATE sandboxes SET name=?, state=?, state_reason=?, image=?, snapshot_id=?, spec=?, runtime=?,
		created_at=?, last_active_at=?, terminated_at=?, suspend_image=?, node=? WHERE id=?`,
		sb.Name, sb.State, sb.StateReason, sb.Image, sb.SnapshotID, string(spec), runtimeJSON(sb.Runtime),
		sb.CreatedAt.UnixNano(), sb.LastActiveAt.UnixNano(), nullTime(sb.TerminatedAt), sb.SuspendImage, sb.Node, id)
	if isUniqueViolation(err) {
		return nil, errdefs.Conflict("a sandbox named %q already exists", sb.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("update sandbox %s: %w", id, err)
	}
	if sb.State != from {
		if err := insertEvent(ctx, tx, id, from, sb.State, sb.StateReason, time.Now()); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return sb, nil
}

// Touch implements Store.
func (s *SQLite) Touch(ctx context.Context, id string, at time.Time) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET last_active_at = MAX(last_active_at, ?) WHERE id = ?`, at.UnixNano(), id); err != nil {
		return fmt.Errorf("touch sandbox %s: %w", id, err)
	}
	return nil
}

// Events implements Store.
func (s *SQLite) Events(ctx context.Context, id string) ([]Event, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, sandbox_id, from_state, to_state, reason, at FROM sandbox_events WHERE sandbox_id = ? ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var at int64
		if err := rows.Scan(&e.ID, &e.SandboxID, &e.From, &e.To, &e.Reason, &at); err != nil {
			return nil, err
		}
		e.At = time.Unix(0, at).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

const snapshotCols = `id, name, type, sandbox_id, parent_id, image, spec, size_bytes, checksum, paused_ms, created_at, tenant`

func scanSnapshot(r scanner) (*Snapshot, error) {
	var (
		sn      Snapshot
		spec    string
		created int64
	)
	if err := r.Scan(&sn.ID, &sn.Name, &sn.Type, &sn.SandboxID, &sn.ParentID, &sn.Image, &spec, &sn.SizeBytes, &sn.Checksum, &sn.PausedMS, &created, &sn.Tenant); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(spec), &sn.Spec); err != nil {
		return nil, fmt.Errorf("snapshot %s: decode spec: %w", sn.ID, err)
	}
	sn.CreatedAt = time.Unix(0, created).UTC()
	return &sn, nil
}

// CreateSnapshot implements Store.
func (s *SQLite) CreateSnapshot(ctx context.Context, sn *Snapshot) error {
	spec, err := json.Marshal(sn.Spec)
	if err != nil {
		return err
	}
	sn.Tenant = ownerFor(ctx, sn.Tenant)
	_, err = s.db.ExecContext(ctx, `INSERT INTO snapshots(`+snapshotCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
		sn.ID, sn.Name, sn.Type, sn.SandboxID, sn.ParentID, sn.Image, string(spec), sn.SizeBytes, sn.Checksum, sn.PausedMS, sn.CreatedAt.UnixNano(), sn.Tenant)
	if isUniqueViolation(err) {
		return errdefs.Conflict("snapshot %s already exists", sn.ID)
	}
	if err != nil {
		return fmt.Errorf("insert snapshot: %w", err)
	}
	return nil
}

// GetSnapshot implements Store.
func (s *SQLite) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	sn, err := scanSnapshot(s.db.QueryRowContext(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = ?1 AND (?2 = '' OR tenant = ?2)`, id, tenant.Of(ctx)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("snapshot %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get snapshot %q: %w", id, err)
	}
	return sn, nil
}

// ListSnapshots implements Store.
func (s *SQLite) ListSnapshots(ctx context.Context, sandboxID string) ([]*Snapshot, error) {
	out, _, err := s.ListSnapshotsPage(ctx, SnapshotFilter{SandboxID: sandboxID}, Page{})
	return out, err
}

// ListSnapshotsPage implements Store.
func (s *SQLite) ListSnapshotsPage(ctx context.Context, f SnapshotFilter, p Page) ([]*Snapshot, string, error) {
	query, args, err := snapshotListQuery(false, tenant.Of(ctx), f, p)
	if err != nil {
		return nil, "", err
	}
	out, err := sqliteRows(ctx, s.db, "list snapshots", query, args, scanSnapshot)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, p, snapshotCursor)
	return out, next, nil
}

// DeleteSnapshot implements Store.
func (s *SQLite) DeleteSnapshot(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?1 AND (?2 = '' OR tenant = ?2)`, id, tenant.Of(ctx))
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("snapshot %q not found", id)
	}
	return nil
}

// CreatePool implements Store.
func (s *SQLite) CreatePool(ctx context.Context, p *Pool) error {
	p.Tenant = ownerFor(ctx, p.Tenant)
	_, err := s.db.ExecContext(ctx, `INSERT INTO pools(tenant, name, snapshot_id, image, size, created_at) VALUES (?,?,?,?,?,?)`,
		p.Tenant, p.Name, p.SnapshotID, p.Image, p.Size, p.CreatedAt.UnixNano())
	if isUniqueViolation(err) {
		return errdefs.Conflict("a pool named %q already exists", p.Name)
	}
	if err != nil {
		return fmt.Errorf("insert pool: %w", err)
	}
	return nil
}

// ListPools implements Store.
func (s *SQLite) ListPools(ctx context.Context) ([]*Pool, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tenant, name, snapshot_id, image, size, created_at FROM pools
		WHERE (?1 = '' OR tenant = ?1) ORDER BY tenant, name`, tenant.Of(ctx))
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	defer rows.Close()
	var out []*Pool
	for rows.Next() {
		var p Pool
		var created int64
		if err := rows.Scan(&p.Tenant, &p.Name, &p.SnapshotID, &p.Image, &p.Size, &created); err != nil {
			return nil, err
		}
		p.CreatedAt = time.Unix(0, created).UTC()
		out = append(out, &p)
	}
	return out, rows.Err()
}

// DeletePool implements Store.
func (s *SQLite) DeletePool(ctx context.Context, owner, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM pools WHERE tenant = ?1 AND name = ?2 AND (?3 = '' OR tenant = ?3)`, owner, name, tenant.Of(ctx))
	if err != nil {
		return fmt.Errorf("delete pool %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("pool %q not found", name)
	}
	return nil
}

// ownerFor is the tenant a new row belongs to: the context's, when it has
// one (a request), or else the one the caller set (the daemon's own work
// on a tenant's behalf, such as a pool refill), or the default tenant.
func ownerFor(ctx context.Context, set string) string {
	if t := tenant.Of(ctx); t != "" {
		return t
	}
	if set != "" {
		return set
	}
	return tenant.Default
}
