package store_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/store/storetest"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSQLiteConformance(t *testing.T) {
	t.Parallel()
	storetest.RunBackend(t, func(t *testing.T) store.Backend {
		return openSQLite(t, filepath.Join(t.TempDir(), "forkbox.db"))
	})
}

// Several daemons on one SQLite file (several processes) are held to the
// same contract as several on one PostgreSQL database.
func TestSQLiteConcurrentInstances(t *testing.T) {
	t.Parallel()
	storetest.RunConcurrent(t, func(t *testing.T, n int) []store.Backend {
		path := filepath.Join(t.TempDir(), "forkbox.db")
		var out []store.Backend
		for range n {
			out = append(out, openClosing(t, path))
		}
		return out
	})
}

// Conversations, turns and uploads survive a reopen, and a database made
// before they existed (schema 5) gains their tables without losing anything.
func TestSQLiteConversationsReopenAndUpgrade(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forkbox.db")
	s := openSQLite(t, path)
	if err := s.Create(ctx, testSandbox(1)); err != nil {
		t.Fatal(err)
	}
	// Back to schema 5, as an older forkbox left it: 10, 9, 8, 7 undone, then 6.
	db := store.RawDB(s)
	for _, q := range []string{`DROP INDEX sandboxes_tenant_created`, `DROP INDEX sandboxes_tenant_live`, `DROP INDEX snapshots_tenant_created`,
		`DROP INDEX conversations_tenant_updated`, `DROP INDEX conversations_sandbox`, `DROP TABLE nodes`, `DROP INDEX sandboxes_node`, `ALTER TABLE sandboxes DROP COLUMN node`, `DROP TABLE cells`, `DROP TABLE audit`, `DROP TABLE tenants`, `DROP TABLE api_keys`,
		`DROP INDEX sandboxes_live_name`, `DROP INDEX sandboxes_name`, `ALTER TABLE sandboxes DROP COLUMN tenant`,
		`CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(name) WHERE name != '' AND state != 'terminated'`,
		`CREATE INDEX sandboxes_name ON sandboxes(name)`, `ALTER TABLE snapshots DROP COLUMN tenant`,
		`CREATE TABLE pools_o (name TEXT PRIMARY KEY, snapshot_id TEXT NOT NULL DEFAULT '', image TEXT NOT NULL DEFAULT '', size INTEGER NOT NULL, created_at INTEGER NOT NULL)`,
		`INSERT INTO pools_o SELECT name, snapshot_id, image, size, created_at FROM pools`, `DROP TABLE pools`, `ALTER TABLE pools_o RENAME TO pools`,
		`INSERT INTO pools(name, size, created_at) VALUES ('py', 2, 1)`,
		`DROP TABLE conversation_turns`, `DROP TABLE conversations`, `DROP TABLE uploads`,
		`DELETE FROM schema_migrations WHERE version >= 6`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()

	s = openSQLite(t, path)
	if v, err := s.SchemaVersion(ctx); err != nil || v != store.NumMigrations {
		t.Fatalf("after upgrade SchemaVersion = %d, %v; want %d", v, err, store.NumMigrations)
	}
	// testSandbox's Tenant is the default one, which the upgrade gives it.
	if sb, err := s.Get(ctx, testSandbox(1).ID); err != nil {
		t.Fatalf("sandbox lost in the upgrade: %v", err)
	} else if d := storetest.Diff(testSandbox(1), sb); d != "" {
		t.Fatalf("sandbox after the upgrade differs:%s", d)
	}
	wantPools := []*store.Pool{{Tenant: api.DefaultTenant, Name: "py", Size: 2, CreatedAt: time.Unix(0, 1)}}
	if ps, err := s.ListPools(ctx); err != nil {
		t.Fatalf("ListPools after the upgrade: %v", err)
	} else if d := cmp.Diff(wantPools, ps, storetest.RecordOptions); d != "" {
		t.Fatalf("pools after the upgrade differ (-want +got):\n%s", d)
	}
	created := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	conv := &store.Conversation{ID: "conv_1", Title: "sales", SandboxID: "sbx_1", SandboxName: "conv-conv_1", Model: "m",
		CreatedAt: created, UpdatedAt: created}
	if err := s.CreateConversation(ctx, conv); err != nil {
		t.Fatal(err)
	}
	turn := &store.Turn{ConversationID: "conv_1", Turn: json.RawMessage(`{"question":"q","answer":"42"}`),
		Messages: json.RawMessage(`[{"role":"user"}]`), CreatedAt: created.Add(time.Second)}
	if err := s.AppendTurn(ctx, turn); err != nil {
		t.Fatal(err)
	}
	up := &store.Upload{ID: "file_1", Name: "sales.csv", SizeBytes: 10, SHA256: "ab", Columns: []string{"a", "b"}, Rows: 3,
		ConversationID: "conv_1", CreatedAt: created}
	if err := s.CreateUpload(ctx, up); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openClosing(t, path)
	gotConv, err := s.GetConversation(ctx, "conv_1")
	if err != nil {
		t.Fatal(err)
	}
	wantConv := store.Conversation{ID: "conv_1", Tenant: api.DefaultTenant, Title: "sales", SandboxID: "sbx_1", SandboxName: "conv-conv_1",
		Model: "m", CreatedAt: created, UpdatedAt: turn.CreatedAt}
	if d := cmp.Diff(&wantConv, gotConv, storetest.RecordOptions); d != "" {
		t.Errorf("conversation after reopen (-want +got):\n%s", d)
	}
	turns, err := s.ListTurns(ctx, "conv_1")
	if err != nil {
		t.Fatal(err)
	}
	wantTurn := store.Turn{ConversationID: "conv_1", Seq: 1, Turn: json.RawMessage(`{"question":"q","answer":"42"}`),
		Messages: json.RawMessage(`[{"role":"user"}]`), CreatedAt: created.Add(time.Second)}
	if d := cmp.Diff([]*store.Turn{&wantTurn}, turns, storetest.RecordOptions); d != "" {
		t.Errorf("turns after reopen (-want +got):\n%s", d)
	}
	gotUp, err := s.GetUpload(ctx, "file_1")
	if err != nil {
		t.Fatal(err)
	}
	wantUp := store.Upload{ID: "file_1", Tenant: api.DefaultTenant, Name: "sales.csv", SizeBytes: 10, SHA256: "ab", Columns: []string{"a", "b"},
		Rows: 3, ConversationID: "conv_1", CreatedAt: created}
	if d := cmp.Diff(&wantUp, gotUp, storetest.RecordOptions); d != "" {
		t.Errorf("upload after reopen (-want +got):\n%s", d)
	}
}

// openSQLite opens path; the caller closes it.
func openSQLite(t *testing.T, path string) *store.SQLite {
	t.Helper()
	s, err := store.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatalf("OpenSQLite(%s): %v", path, err)
	}
	return s
}

// openClosing opens path and closes it when the test ends.
func openClosing(t *testing.T, path string) *store.SQLite {
	t.Helper()
	s := openSQLite(t, path)
	t.Cleanup(func() { s.Close() })
	return s
}

func testSandbox(i int) *store.Sandbox {
	created := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*time.Second + time.Duration(i)*7)
	return &store.Sandbox{
		ID:          fmt.Sprintf("sb-%03d", i),
		Tenant:      api.DefaultTenant,
		Name:        fmt.Sprintf("name-%03d", i),
		State:       api.StateCreating,
		StateReason: "requested",
		Image:       "python:3.12",
		Spec: store.Spec{
			CPUs: 1, MemoryMB: 256, DiskMB: 512, PIDsLimit: 64, TimeoutSecs: 60,
			Labels: map[string]string{"i": strconv.Itoa(i)},
		},
		Runtime:      json.RawMessage(fmt.Sprintf(`{"pid":%d}`, 1000+i)),
		CreatedAt:    created,
		LastActiveAt: created,
	}
}

type snapshot struct {
	sandboxes []*store.Sandbox
	events    map[string][]store.Event
}

func takeSnapshot(t *testing.T, s store.Store) snapshot {
	t.Helper()
	ctx := context.Background()
	all, err := s.List(ctx, store.ListFilter{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	snap := snapshot{sandboxes: all, events: map[string][]store.Event{}}
	for _, sb := range all {
		ev, err := s.Events(ctx, sb.ID)
		if err != nil {
			t.Fatalf("Events(%s): %v", sb.ID, err)
		}
		snap.events[sb.ID] = ev
	}
	return snap
}

func compareSnapshots(t *testing.T, want, got snapshot) {
	t.Helper()
	if len(want.sandboxes) != len(got.sandboxes) {
		t.Fatalf("%d sandboxes, want %d", len(got.sandboxes), len(want.sandboxes))
	}
	for i := range want.sandboxes {
		if d := storetest.Diff(want.sandboxes[i], got.sandboxes[i]); d != "" {
			t.Errorf("sandbox %d (%s) differs:%s", i, want.sandboxes[i].ID, d)
		}
	}
	if d := cmp.Diff(want.events, got.events, storetest.RecordOptions); d != "" {
		t.Errorf("events differ (-want +got):\n%s", d)
	}
}

func TestSQLiteReopenKeepsEverything(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forkbox.db")
	s := openSQLite(t, path)
	for i := range 10 {
		if err := s.Create(ctx, testSandbox(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		id := testSandbox(i).ID
		if _, err := s.Update(ctx, id, func(sb *store.Sandbox) error {
			sb.State = api.StateRunning
			sb.StateReason = "started"
			sb.Runtime = json.RawMessage(`{"pid":` + strconv.Itoa(2000+i) + `,"net":{"ip":"10.0.0.` + strconv.Itoa(i) + `"}}`)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			term := time.Date(2025, 2, 1, 0, 0, 0, i, time.UTC)
			if _, err := s.Update(ctx, id, func(sb *store.Sandbox) error {
				sb.State, sb.StateReason, sb.TerminatedAt = api.StateTerminated, "deleted", &term
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Touch(ctx, id, time.Date(2025, 3, 1, 0, 0, 0, i, time.UTC)); err != nil {
			t.Fatal(err)
		}
	}
	before := takeSnapshot(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	for round := range 2 {
		s = openSQLite(t, path)
		compareSnapshots(t, before, takeSnapshot(t, s))
		// The live-name index survived as well.
		err := s.Create(ctx, &store.Sandbox{ID: fmt.Sprintf("dup-%d", round), Name: "name-001", State: api.StateRunning,
			CreatedAt: time.Now(), LastActiveAt: time.Now()})
		if !isConflict(err) {
			t.Errorf("after reopen, Create with live name: err = %v, want conflict", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
}

func isConflict(err error) bool { return errors.Is(err, errdefs.ErrConflict) }

func schemaRows(t *testing.T, db *sql.DB) map[int]int64 {
	t.Helper()
	rows, err := db.Query(`SELECT version, applied_at FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int]int64{}
	for rows.Next() {
		var v int
		var at int64
		if err := rows.Scan(&v, &at); err != nil {
			t.Fatal(err)
		}
		out[v] = at
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSQLiteSchemaVersion(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forkbox.db")
	s := openSQLite(t, path)
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v != store.NumMigrations || v < 1 {
		t.Fatalf("SchemaVersion = %d, want %d", v, store.NumMigrations)
	}
	first := schemaRows(t, store.RawDB(s))
	if len(first) != store.NumMigrations {
		t.Fatalf("schema_migrations rows = %v, want one per migration (%d)", first, store.NumMigrations)
	}
	for i := 1; i <= store.NumMigrations; i++ {
		if _, ok := first[i]; !ok {
			t.Errorf("schema_migrations lacks version %d: %v", i, first)
		}
	}
	if err := s.Create(ctx, testSandbox(1)); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Reopening applies nothing again: the rows and their applied_at stay
	// as they were (a re-applied CREATE TABLE would also fail outright).
	for range 2 {
		s = openSQLite(t, path)
		v, err := s.SchemaVersion(ctx)
		if err != nil || v != store.NumMigrations {
			t.Fatalf("after reopen SchemaVersion = %d, %v; want %d", v, err, store.NumMigrations)
		}
		again := schemaRows(t, store.RawDB(s))
		if fmt.Sprint(again) != fmt.Sprint(first) {
			t.Errorf("schema_migrations after reopen = %v, want unchanged %v", again, first)
		}
		if _, err := s.Get(ctx, testSandbox(1).ID); err != nil {
			t.Errorf("Get after reopen: %v", err)
		}
		s.Close()
	}
}

func TestSQLiteRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "forkbox.db")
	s := openSQLite(t, path)
	if err := s.Create(context.Background(), testSandbox(1)); err != nil {
		t.Fatal(err)
	}
	future := store.NumMigrations + 1
	if _, err := store.RawDB(s).Exec(`INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)`, future, time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s2, err := store.OpenSQLite(context.Background(), path)
	if err == nil {
		s2.Close()
		t.Fatalf("OpenSQLite of a schema %d database succeeded; want refusal", future)
	}
	msg := err.Error()
	for _, want := range []string{"newer", "refusing", strconv.Itoa(future), strconv.Itoa(store.NumMigrations)} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}

	// The refused database was left alone.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows := schemaRows(t, db)
	if len(rows) != future {
		t.Errorf("schema_migrations after refusal = %v, want %d rows", rows, future)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sandboxes`).Scan(&n); err != nil || n != 1 {
		t.Errorf("sandboxes after refusal: %d, %v; want 1", n, err)
	}
}

// checkPragmas verifies the durability settings on several pooled
// connections at once (each connection applies its own pragmas).
func checkPragmas(t *testing.T, s *store.SQLite) {
	t.Helper()
	ctx := context.Background()
	db := store.RawDB(s)
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 4 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		for _, p := range []struct{ pragma, want string }{
			{"journal_mode", "wal"},
			{"synchronous", "2"}, // FULL
			{"foreign_keys", "1"},
			{"busy_timeout", "10000"},
		} {
			var got string
			if err := c.QueryRowContext(ctx, "PRAGMA "+p.pragma).Scan(&got); err != nil {
				t.Fatalf("conn %d: PRAGMA %s: %v", i, p.pragma, err)
			}
			if strings.ToLower(got) != p.want {
				t.Errorf("conn %d: PRAGMA %s = %s, want %s", i, p.pragma, got, p.want)
			}
		}
	}
}

func TestSQLitePragmas(t *testing.T) {
	s := openClosing(t, filepath.Join(t.TempDir(), "forkbox.db"))
	checkPragmas(t, s)
}

// A data directory may contain characters that mean something in a URI:
// the database must be created at exactly the given path, with its pragmas.
func TestSQLiteURIUnsafePath(t *testing.T) {
	for _, dir := range []string{"has#hash", "has?query=1", "percent%41%zz", "with space", "mixed #?%&=;"} {
		t.Run("", func(t *testing.T) {
			parent := t.TempDir()
			path := filepath.Join(parent, dir, "forkbox.db")
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			s := openSQLite(t, path)
			if err := s.Create(context.Background(), testSandbox(1)); err != nil {
				t.Fatal(err)
			}
			checkPragmas(t, s)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
				t.Fatalf("database not at %q: %v", path, err)
			}
			// Nothing was created anywhere else.
			var stray []string
			filepath.Walk(parent, func(p string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() && filepath.Dir(p) != filepath.Dir(path) {
					stray = append(stray, p)
				}
				return nil
			})
			if len(stray) > 0 {
				t.Errorf("stray files: %q", stray)
			}
			s = openSQLite(t, path)
			defer s.Close()
			if _, err := s.Get(context.Background(), testSandbox(1).ID); err != nil {
				t.Errorf("Get after reopen: %v", err)
			}
		})
	}
}

// Several processes (the daemon and an admin command, say) may open a fresh
// database at the same moment: each must end up at the latest schema rather
// than fail re-applying a migration another one just applied.
func TestSQLiteConcurrentOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "forkbox.db")
	const n = 8
	var wg sync.WaitGroup
	stores := make([]*store.SQLite, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			stores[i], errs[i] = store.OpenSQLite(context.Background(), path)
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("open %d: %v", i, errs[i])
			continue
		}
		if v, err := stores[i].SchemaVersion(context.Background()); err != nil || v != store.NumMigrations {
			t.Errorf("open %d: SchemaVersion = %d, %v", i, v, err)
		}
		stores[i].Close()
	}
	s := openClosing(t, path)
	if rows := schemaRows(t, store.RawDB(s)); len(rows) != store.NumMigrations {
		t.Errorf("schema_migrations = %v", rows)
	}
}

const (
	killEnvDB = "FORKBOX_STORE_TEST_KILL_DB"
	killEnvN  = "FORKBOX_STORE_TEST_KILL_N"
)

// TestHelperKill is the child of TestSQLiteSurvivesSIGKILL: it writes, says
// "done" and waits to be killed without ever closing the database.
func TestHelperKill(t *testing.T) {
	path := os.Getenv(killEnvDB)
	if path == "" {
		t.Skip("helper process for TestSQLiteSurvivesSIGKILL")
	}
	n, err := strconv.Atoi(os.Getenv(killEnvN))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad", killEnvN, err)
		os.Exit(2)
	}
	ctx := context.Background()
	s, err := store.OpenSQLite(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	for i := range n {
		sb := testSandbox(i)
		if err := s.Create(ctx, sb); err != nil {
			fmt.Fprintln(os.Stderr, "create:", err)
			os.Exit(2)
		}
		if _, err := s.Update(ctx, sb.ID, func(sb *store.Sandbox) error {
			sb.State, sb.StateReason = api.StateRunning, "started"
			return nil
		}); err != nil {
			fmt.Fprintln(os.Stderr, "update:", err)
			os.Exit(2)
		}
	}
	fmt.Println("done")
	// Block until killed. Should the parent die instead, its end of stdin
	// closes and the child goes away too, still without closing the db.
	io.Copy(io.Discard, os.Stdin)
	os.Exit(3)
}

func TestSQLiteSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	const n = 40
	path := filepath.Join(t.TempDir(), "forkbox.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperKill$", "-test.count=1")
	cmd.Env = append(os.Environ(), killEnvDB+"="+path, killEnvN+"="+strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "done" {
				done <- nil
				return
			}
		}
		done <- fmt.Errorf("child's stdout ended before \"done\" (%v)", sc.Err())
	}()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		err = errors.New("timed out waiting for \"done\"")
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("%v; child stderr:\n%s", err, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v; stderr:\n%s", werr, stderr.String())
	}
	// The WAL was never checkpointed by a clean close.
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() == 0 {
		t.Logf("note: no WAL left behind (%v)", err)
	}

	ctx := context.Background()
	s := openClosing(t, path)
	all, err := s.List(ctx, store.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n {
		t.Fatalf("%d sandboxes after SIGKILL, want %d", len(all), n)
	}
	for i := range n {
		want := testSandbox(i)
		want.State, want.StateReason = api.StateRunning, "started"
		got, err := s.Get(ctx, want.ID)
		if err != nil {
			t.Errorf("Get(%s): %v", want.ID, err)
			continue
		}
		if d := storetest.Diff(want, got); d != "" {
			t.Errorf("%s differs:%s", want.ID, d)
		}
		ev, err := s.Events(ctx, want.ID)
		if err != nil {
			t.Errorf("Events(%s): %v", want.ID, err)
			continue
		}
		wantEv := []store.Event{
			{SandboxID: want.ID, From: "", To: api.StateCreating, Reason: "requested"},
			{SandboxID: want.ID, From: api.StateCreating, To: api.StateRunning, Reason: "started"},
		}
		// ID and At are the store's to assign: only the changes are known.
		if d := cmp.Diff(wantEv, ev, storetest.RecordOptions, cmpopts.IgnoreFields(store.Event{}, "ID", "At")); d != "" {
			t.Errorf("Events(%s) differ (-want +got):\n%s", want.ID, d)
		}
	}
}
