package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/tenant"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgMigrations are PostgreSQL's schema migrations, applied in order like
// SQLite's (migrations): the index of an entry plus one is its version.
// Never edit a shipped entry: append a new one.
//
// The schema is SQLite's (SQLite's versions 1 to 9 are PostgreSQL's 1, its
// 10 is 2), with the same column names and the same encodings so that both
// backends behave alike: instants are
// bigint nanoseconds since the epoch (timestamptz keeps only microseconds),
// JSON documents are text kept byte for byte, and the columns results are
// ordered by collate "C" (bytewise, as SQLite compares).
var pgMigrations = []string{
	// 1: everything up to nodes (SQLite's 1 to 9).
	`CREATE TABLE sandboxes (
		id             TEXT COLLATE "C" PRIMARY KEY,
		tenant         TEXT COLLATE "C" NOT NULL DEFAULT 'default',
		name           TEXT NOT NULL DEFAULT '',
		state          TEXT NOT NULL,
		state_reason   TEXT NOT NULL DEFAULT '',
		image          TEXT NOT NULL DEFAULT '',
		snapshot_id    TEXT NOT NULL DEFAULT '',
		spec           TEXT NOT NULL,
		runtime        TEXT NOT NULL DEFAULT '{}',
		created_at     BIGINT NOT NULL,
		last_active_at BIGINT NOT NULL,
		terminated_at  BIGINT,
		suspend_image  TEXT NOT NULL DEFAULT '',
		node           TEXT NOT NULL DEFAULT ''
	);
	CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(tenant, name)
		WHERE name != '' AND state != 'terminated';
	CREATE INDEX sandboxes_name ON sandboxes(name, tenant);
	CREATE INDEX sandboxes_state ON sandboxes(state);
	CREATE INDEX sandboxes_node ON sandboxes(node);
	CREATE TABLE sandbox_events (
		id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
		from_state TEXT NOT NULL,
		to_state   TEXT NOT NULL,
		reason     TEXT NOT NULL DEFAULT '',
		at         BIGINT NOT NULL
	);
	CREATE INDEX sandbox_events_sandbox ON sandbox_events(sandbox_id, id);
	CREATE TABLE snapshots (
		id          TEXT COLLATE "C" PRIMARY KEY,
		tenant      TEXT NOT NULL DEFAULT 'default',
		name        TEXT NOT NULL DEFAULT '',
		type        TEXT NOT NULL,
		sandbox_id  TEXT NOT NULL DEFAULT '',
		parent_id   TEXT NOT NULL DEFAULT '',
		image       TEXT NOT NULL DEFAULT '',
		spec        TEXT NOT NULL,
		size_bytes  BIGINT NOT NULL DEFAULT 0,
		checksum    TEXT NOT NULL DEFAULT '',
		paused_ms   BIGINT NOT NULL DEFAULT 0,
		created_at  BIGINT NOT NULL
	);
	CREATE INDEX snapshots_sandbox ON snapshots(sandbox_id, created_at);
	CREATE TABLE pools (
		tenant      TEXT COLLATE "C" NOT NULL DEFAULT 'default',
		name        TEXT COLLATE "C" NOT NULL,
		snapshot_id TEXT NOT NULL DEFAULT '',
		image       TEXT NOT NULL DEFAULT '',
		size        BIGINT NOT NULL,
		created_at  BIGINT NOT NULL,
		PRIMARY KEY (tenant, name)
	);
	CREATE TABLE conversations (
		id           TEXT COLLATE "C" PRIMARY KEY,
		tenant       TEXT NOT NULL DEFAULT 'default',
		title        TEXT NOT NULL DEFAULT '',
		sandbox_id   TEXT NOT NULL DEFAULT '',
		sandbox_name TEXT NOT NULL DEFAULT '',
		model        TEXT NOT NULL DEFAULT '',
		created_at   BIGINT NOT NULL,
		updated_at   BIGINT NOT NULL
	);
	CREATE INDEX conversations_updated ON conversations(updated_at);
	CREATE TABLE conversation_turns (
		conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
		seq             INTEGER NOT NULL,
		turn            TEXT NOT NULL DEFAULT '',
		messages        TEXT NOT NULL DEFAULT '',
		created_at      BIGINT NOT NULL,
		PRIMARY KEY (conversation_id, seq)
	);
	CREATE TABLE uploads (
		id              TEXT COLLATE "C" PRIMARY KEY,
		tenant          TEXT NOT NULL DEFAULT 'default',
		name            TEXT NOT NULL,
		size_bytes      BIGINT NOT NULL DEFAULT 0,
		sha256          TEXT NOT NULL DEFAULT '',
		header          TEXT NOT NULL DEFAULT 'null',
		row_count       BIGINT NOT NULL DEFAULT 0,
		conversation_id TEXT NOT NULL DEFAULT '',
		created_at      BIGINT NOT NULL
	);
	CREATE INDEX uploads_conversation ON uploads(conversation_id, created_at);
	CREATE TABLE api_keys (
		id          TEXT COLLATE "C" PRIMARY KEY,
		hash        TEXT NOT NULL UNIQUE,
		tenant      TEXT COLLATE "C" NOT NULL,
		role        TEXT NOT NULL,
		name        TEXT NOT NULL DEFAULT '',
		created_at  BIGINT NOT NULL,
		expires_at  BIGINT,
		revoked_at  BIGINT
	);
	CREATE INDEX api_keys_tenant ON api_keys(tenant);
	CREATE TABLE tenants (
		name       TEXT COLLATE "C" PRIMARY KEY,
		quotas     TEXT NOT NULL DEFAULT '{}',
		updated_at BIGINT NOT NULL
	);
	CREATE TABLE audit (
		id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		at         BIGINT NOT NULL,
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
	CREATE INDEX audit_at ON audit(at);
	CREATE TABLE cells (
		id         TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL DEFAULT 'default',
		sandbox_id TEXT NOT NULL,
		seq        INTEGER NOT NULL,
		source     TEXT NOT NULL,
		language   TEXT NOT NULL DEFAULT '',
		code       TEXT NOT NULL,
		execution  TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		UNIQUE (sandbox_id, seq)
	);
	CREATE TABLE nodes (
		id              TEXT COLLATE "C" PRIMARY KEY,
		address         TEXT NOT NULL DEFAULT '',
		cpus            DOUBLE PRECISION NOT NULL DEFAULT 0,
		memory_bytes    BIGINT NOT NULL DEFAULT 0,
		disk_bytes      BIGINT NOT NULL DEFAULT 0,
		disk_free_bytes BIGINT NOT NULL DEFAULT 0,
		running         BIGINT NOT NULL DEFAULT 0,
		memory_reserved BIGINT NOT NULL DEFAULT 0,
		started_at      BIGINT NOT NULL,
		heartbeat_at    BIGINT NOT NULL
	);`,
	// 2: the indexes of lists paged by keyset and of PruneTerminated
	// (SQLite's 10).
	`CREATE INDEX sandboxes_tenant_created ON sandboxes(tenant, created_at, id);
	CREATE INDEX sandboxes_tenant_live ON sandboxes(tenant, created_at, id) WHERE state != 'terminated';
	CREATE INDEX snapshots_tenant_created ON snapshots(tenant, created_at, id);
	CREATE INDEX conversations_tenant_updated ON conversations(tenant, updated_at, created_at, id);
	CREATE INDEX conversations_sandbox ON conversations(sandbox_id);`,
}

// Advisory lock keys. Migrations take a session lock on the one-bigint key
// pgLockMigrate; per-row serialisation takes transaction locks on two-int
// keys (namespace, hashtext(id)), a key space apart from the bigint one.
const (
	pgLockMigrate int64 = 0x666f726b626f78 // "forkbox"
	pgLockCells   int32 = 1                // (pgLockCells, hashtext(sandbox id))
)

// Postgres is the shared Store: several daemons use one database at once.
// Every read-modify-write locks what it reads (Update's row, a
// conversation's row for its next turn, a sandbox's cells by an advisory
// lock), so concurrent writers on different hosts take turns as SQLite's
// BEGIN IMMEDIATE makes them on one.
type Postgres struct {
	pool *pgxpool.Pool
}

var _ Backend = (*Postgres)(nil)

// OpenPostgres connects to the database at url (postgres://user:pass@host/db
// or any connection string pgx accepts) and migrates it to the latest
// schema. Several daemons may open the same database at once.
func OpenPostgres(ctx context.Context, url string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx redacts the password of the string it quotes.
		return nil, fmt.Errorf("postgres connection string: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	if err := pgMigrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return &Postgres{pool: pool}, nil
}

// pgMigrate brings the database to the latest schema on one connection
// holding the migration lock, so that daemons starting together migrate one
// at a time.
func pgMigrate(ctx context.Context, pool *pgxpool.Pool) error {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	conn := pc.Conn()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, pgLockMigrate); err != nil {
		pc.Release()
		return fmt.Errorf("take the migration lock: %w", err)
	}
	defer func() {
		// The lock is the session's: a connection that may still hold it
		// is closed, not returned to the pool.
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, pgLockMigrate); err != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
		pc.Release()
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	cur, err := pgSchemaVersion(ctx, conn)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if cur > len(pgMigrations) {
		return fmt.Errorf("metadata db is at schema %d, newer than this forkbox (%d): refusing to run", cur, len(pgMigrations))
	}
	for v := cur + 1; v <= len(pgMigrations); v++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// Without arguments Exec uses the simple protocol, which
			// runs a migration's several statements.
			if _, err := tx.Exec(ctx, pgMigrations[v-1]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES ($1, $2)`, v, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	return nil
}

type pgQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func pgSchemaVersion(ctx context.Context, q pgQuerier) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

// SchemaVersion returns the version the database is at.
func (p *Postgres) SchemaVersion(ctx context.Context) (int, error) {
	return pgSchemaVersion(ctx, p.pool)
}

// Close closes the pool's connections.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

// Kind implements Backend.
func (p *Postgres) Kind() string { return "postgres" }

// inTx runs fn in a transaction, committed when fn returns nil. fn's error
// is returned as is.
func (p *Postgres) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func pgUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// Create implements Store.
func (p *Postgres) Create(ctx context.Context, sb *Sandbox) error {
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	sb.Tenant = ownerFor(ctx, sb.Tenant)
	return p.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO sandboxes(`+sandboxCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)`,
			sb.ID, sb.Name, sb.State, sb.StateReason, sb.Image, sb.SnapshotID, string(spec), runtimeJSON(sb.Runtime),
			sb.CreatedAt.UnixNano(), sb.LastActiveAt.UnixNano(), nullTime(sb.TerminatedAt), sb.SuspendImage, sb.Tenant, sb.Node)
		if pgUniqueViolation(err) {
			if sb.Name != "" {
				return errdefs.Conflict("a sandbox named %q already exists", sb.Name)
			}
			return errdefs.Conflict("sandbox %s already exists", sb.ID)
		}
		if err != nil {
			return fmt.Errorf("insert sandbox: %w", err)
		}
		return pgInsertEvent(ctx, tx, sb.ID, "", sb.State, sb.StateReason, sb.CreatedAt)
	})
}

func pgInsertEvent(ctx context.Context, tx pgx.Tx, id string, from, to api.SandboxState, reason string, at time.Time) error {
	if _, err := tx.Exec(ctx, `INSERT INTO sandbox_events(sandbox_id, from_state, to_state, reason, at) VALUES ($1,$2,$3,$4,$5)`,
		id, from, to, reason, at.UnixNano()); err != nil {
		return fmt.Errorf("insert event: %w", err)
	}
	return nil
}

// Get implements Store.
func (p *Postgres) Get(ctx context.Context, ref string) (*Sandbox, error) {
	sb, err := scanSandbox(p.pool.QueryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes
		WHERE (id = $1 OR (name = $1 AND name != '')) AND ($2 = '' OR tenant = $2)
		ORDER BY (id = $1) DESC, (state != 'terminated') DESC, created_at DESC LIMIT 1`, ref, tenant.Of(ctx)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("sandbox %q not found", ref)
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %q: %w", ref, err)
	}
	return sb, nil
}

// List implements Store.
func (p *Postgres) List(ctx context.Context, f ListFilter) ([]*Sandbox, error) {
	out, _, err := p.ListPage(ctx, f, Page{})
	return out, err
}

// ListPage implements Store.
func (p *Postgres) ListPage(ctx context.Context, f ListFilter, pg Page) ([]*Sandbox, string, error) {
	query, args, err := sandboxListQuery(true, tenant.Of(ctx), f, pg)
	if err != nil {
		return nil, "", err
	}
	out, err := pgRows(ctx, p.pool, "list sandboxes", query, args, scanSandbox)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, pg, sandboxCursor(pg))
	return out, next, nil
}

// pgRows runs query and scans every row it returns.
func pgRows[T any](ctx context.Context, pool *pgxpool.Pool, what, query string, args []any, scan func(scanner) (T, error)) ([]T, error) {
	rows, err := pool.Query(ctx, query, args...)
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

// PruneTerminated implements Store: a batch at a time, each in its own
// transaction, like SQLite's.
func (p *Postgres) PruneTerminated(ctx context.Context, before time.Time) (int64, error) {
	del := (&sqlQuery{pg: true})
	del.add(`id IN (`+prunableSandboxes+`)`, before.UnixNano())
	var total int64
	for {
		var ids []string
		err := p.inTx(ctx, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `DELETE FROM sandboxes WHERE `+del.sql()+` RETURNING id`, del.args...)
			if err != nil {
				return fmt.Errorf("prune terminated sandboxes: %w", err)
			}
			ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return fmt.Errorf("prune terminated sandboxes: %w", err)
			}
			if len(ids) == 0 {
				return nil
			}
			if _, err := tx.Exec(ctx, `DELETE FROM sandbox_events WHERE sandbox_id = ANY($1)`, ids); err != nil {
				return fmt.Errorf("prune terminated sandboxes' events: %w", err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM cells WHERE sandbox_id = ANY($1)`, ids); err != nil {
				return fmt.Errorf("prune terminated sandboxes' cells: %w", err)
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += int64(len(ids))
		if len(ids) < pruneBatch {
			return total, nil
		}
	}
}

// Update implements Store. The row is read FOR UPDATE: another daemon's
// Update of the same sandbox waits for this one to commit and then reads
// its result.
func (p *Postgres) Update(ctx context.Context, id string, fn func(*Sandbox) error) (*Sandbox, error) {
	var out *Sandbox
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		sb, err := scanSandbox(tx.QueryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes
			WHERE id = $1 AND ($2 = '' OR tenant = $2) FOR UPDATE`, id, tenant.Of(ctx)))
		if errors.Is(err, pgx.ErrNoRows) {
			return errdefs.NotFound("sandbox %q not found", id)
		}
		if err != nil {
			return fmt.Errorf("read sandbox %s: %w", id, err)
		}
		from, owner := sb.State, sb.Tenant
		if err := fn(sb); err != nil {
			return err
		}
		// ID and Tenant are not written back: keep the returned record
		// equal to the stored one.
		sb.ID, sb.Tenant = id, owner
		spec, err := json.Marshal(sb.Spec)
		if err != nil {
			return fmt.Errorf("encode spec: %w", err)
		}
		_, err = tx.Exec(ctx, `UPDATE sandboxes SET name=$1, state=$2, state_reason=$3, image=$4, snapshot_id=$5, spec=$6, runtime=$7,
			created_at=$8, last_active_at=$9, terminated_at=$10, suspend_image=$11, node=$12 WHERE id=$13`,
			sb.Name, sb.State, sb.StateReason, sb.Image, sb.SnapshotID, string(spec), runtimeJSON(sb.Runtime),
			sb.CreatedAt.UnixNano(), sb.LastActiveAt.UnixNano(), nullTime(sb.TerminatedAt), sb.SuspendImage, sb.Node, id)
		if pgUniqueViolation(err) {
			return errdefs.Conflict("a sandbox named %q already exists", sb.Name)
		}
		if err != nil {
			return fmt.Errorf("update sandbox %s: %w", id, err)
		}
		if sb.State != from {
			if err := pgInsertEvent(ctx, tx, id, from, sb.State, sb.StateReason, time.Now()); err != nil {
				return err
			}
		}
		out = sb
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Touch implements Store.
func (p *Postgres) Touch(ctx context.Context, id string, at time.Time) error {
	if _, err := p.pool.Exec(ctx, `UPDATE sandboxes SET last_active_at = GREATEST(last_active_at, $1) WHERE id = $2`, at.UnixNano(), id); err != nil {
		return fmt.Errorf("touch sandbox %s: %w", id, err)
	}
	return nil
}

// Events implements Store.
func (p *Postgres) Events(ctx context.Context, id string) ([]Event, error) {
	rows, err := p.pool.Query(ctx, `SELECT id, sandbox_id, from_state, to_state, reason, at FROM sandbox_events WHERE sandbox_id = $1 ORDER BY id`, id)
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// CreateSnapshot implements Store.
func (p *Postgres) CreateSnapshot(ctx context.Context, sn *Snapshot) error {
	spec, err := json.Marshal(sn.Spec)
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	sn.Tenant = ownerFor(ctx, sn.Tenant)
	_, err = p.pool.Exec(ctx, `INSERT INTO snapshots(`+snapshotCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)`,
		sn.ID, sn.Name, sn.Type, sn.SandboxID, sn.ParentID, sn.Image, string(spec), sn.SizeBytes, sn.Checksum, sn.PausedMS, sn.CreatedAt.UnixNano(), sn.Tenant)
	if pgUniqueViolation(err) {
		return errdefs.Conflict("snapshot %s already exists", sn.ID)
	}
	if err != nil {
		return fmt.Errorf("insert snapshot: %w", err)
	}
	return nil
}

// GetSnapshot implements Store.
func (p *Postgres) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	sn, err := scanSnapshot(p.pool.QueryRow(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = $1 AND ($2 = '' OR tenant = $2)`, id, tenant.Of(ctx)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("snapshot %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get snapshot %q: %w", id, err)
	}
	return sn, nil
}

// ListSnapshots implements Store.
func (p *Postgres) ListSnapshots(ctx context.Context, sandboxID string) ([]*Snapshot, error) {
	out, _, err := p.ListSnapshotsPage(ctx, SnapshotFilter{SandboxID: sandboxID}, Page{})
	return out, err
}

// ListSnapshotsPage implements Store.
func (p *Postgres) ListSnapshotsPage(ctx context.Context, f SnapshotFilter, pg Page) ([]*Snapshot, string, error) {
	query, args, err := snapshotListQuery(true, tenant.Of(ctx), f, pg)
	if err != nil {
		return nil, "", err
	}
	out, err := pgRows(ctx, p.pool, "list snapshots", query, args, scanSnapshot)
	if err != nil {
		return nil, "", err
	}
	out, next := cutPage(out, pg, snapshotCursor)
	return out, next, nil
}

// DeleteSnapshot implements Store.
func (p *Postgres) DeleteSnapshot(ctx context.Context, id string) error {
	tag, err := p.pool.Exec(ctx, `DELETE FROM snapshots WHERE id = $1 AND ($2 = '' OR tenant = $2)`, id, tenant.Of(ctx))
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.NotFound("snapshot %q not found", id)
	}
	return nil
}

// CreatePool implements Store.
func (p *Postgres) CreatePool(ctx context.Context, pl *Pool) error {
	pl.Tenant = ownerFor(ctx, pl.Tenant)
	_, err := p.pool.Exec(ctx, `INSERT INTO pools(tenant, name, snapshot_id, image, size, created_at) VALUES ($1,$2,$3,$4,$5,$6)`,
		pl.Tenant, pl.Name, pl.SnapshotID, pl.Image, pl.Size, pl.CreatedAt.UnixNano())
	if pgUniqueViolation(err) {
		return errdefs.Conflict("a pool named %q already exists", pl.Name)
	}
	if err != nil {
		return fmt.Errorf("insert pool: %w", err)
	}
	return nil
}

// ListPools implements Store.
func (p *Postgres) ListPools(ctx context.Context) ([]*Pool, error) {
	rows, err := p.pool.Query(ctx, `SELECT tenant, name, snapshot_id, image, size, created_at FROM pools
		WHERE ($1 = '' OR tenant = $1) ORDER BY tenant, name`, tenant.Of(ctx))
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	defer rows.Close()
	var out []*Pool
	for rows.Next() {
		var pl Pool
		var created int64
		if err := rows.Scan(&pl.Tenant, &pl.Name, &pl.SnapshotID, &pl.Image, &pl.Size, &created); err != nil {
			return nil, err
		}
		pl.CreatedAt = time.Unix(0, created).UTC()
		out = append(out, &pl)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return out, nil
}

// DeletePool implements Store.
func (p *Postgres) DeletePool(ctx context.Context, owner, name string) error {
	tag, err := p.pool.Exec(ctx, `DELETE FROM pools WHERE tenant = $1 AND name = $2 AND ($3 = '' OR tenant = $3)`, owner, name, tenant.Of(ctx))
	if err != nil {
		return fmt.Errorf("delete pool %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.NotFound("pool %q not found", name)
	}
	return nil
}
