package store_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/store/pgtest"
	"github.com/forkbox/forkbox/internal/store/storetest"
	"github.com/jackc/pgx/v5"
)

// TestPostgres runs everything PostgreSQL against one throwaway server
// (pgtest: Debian's PostgreSQL, installed by `make setup`), each test on a
// database of its own.
func TestPostgres(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	ctx := context.Background()

	// A migrated database to copy: each test's database starts at the
	// latest schema without running the migrations again.
	tmplDSN := srv.NewDatabase(t)
	s, err := store.OpenPostgres(ctx, tmplDSN)
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	s.Close()
	tmpl := dbName(t, tmplDSN)

	open := func(t *testing.T, dsn string) *store.Postgres {
		t.Helper()
		s, err := store.OpenPostgres(ctx, dsn)
		if err != nil {
			t.Fatalf("OpenPostgres: %v", err)
		}
		return s
	}
	fresh := func(t *testing.T) *store.Postgres { return open(t, srv.NewDatabaseFrom(t, tmpl)) }

	t.Run("Conformance", func(t *testing.T) {
		storetest.RunBackend(t, func(t *testing.T) store.Backend { return fresh(t) })
	})
	t.Run("ConcurrentInstances", func(t *testing.T) {
		storetest.RunConcurrent(t, func(t *testing.T, n int) []store.Backend {
			dsn := srv.NewDatabaseFrom(t, tmpl)
			var out []store.Backend
			for range n {
				s := open(t, dsn)
				t.Cleanup(func() { s.Close() })
				out = append(out, s)
			}
			return out
		})
	})
	t.Run("Kind", func(t *testing.T) {
		s := fresh(t)
		defer s.Close()
		if k := s.Kind(); k != "postgres" {
			t.Errorf("Kind = %q", k)
		}
	})
	t.Run("SchemaVersion", func(t *testing.T) {
		dsn := srv.NewDatabase(t)
		for range 2 {
			s := open(t, dsn)
			if v, err := s.SchemaVersion(ctx); err != nil || v != store.NumPostgresMigrations || v < 1 {
				t.Errorf("SchemaVersion = %d, %v; want %d", v, err, store.NumPostgresMigrations)
			}
			s.Close()
		}
		if n := count(t, dsn, `SELECT COUNT(*) FROM schema_migrations`); n != store.NumPostgresMigrations {
			t.Errorf("schema_migrations has %d rows, want %d", n, store.NumPostgresMigrations)
		}
	})
	t.Run("RefusesNewerSchema", func(t *testing.T) {
		dsn := srv.NewDatabaseFrom(t, tmpl)
		future := store.NumPostgresMigrations + 1
		pgExec(t, dsn, `INSERT INTO schema_migrations(version, applied_at) VALUES (`+strconv.Itoa(future)+`, 0)`)
		s, err := store.OpenPostgres(ctx, dsn)
		if err == nil {
			s.Close()
			t.Fatalf("OpenPostgres of a schema %d database succeeded; want refusal", future)
		}
		for _, want := range []string{"newer", "refusing", strconv.Itoa(future), strconv.Itoa(store.NumPostgresMigrations)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
	})
	// Daemons starting together on an empty database: the migration lock
	// makes them take turns, and every one ends up at the latest schema.
	t.Run("ConcurrentOpen", func(t *testing.T) {
		dsn := srv.NewDatabase(t)
		const n = 6
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := store.OpenPostgres(ctx, dsn)
				if err == nil {
					_, err = s.List(ctx, store.ListFilter{})
					s.Close()
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("open %d: %v", i, err)
			}
		}
		if n := count(t, dsn, `SELECT COUNT(*) FROM schema_migrations`); n != store.NumPostgresMigrations {
			t.Errorf("schema_migrations has %d rows, want %d", n, store.NumPostgresMigrations)
		}
	})
	t.Run("Open", func(t *testing.T) {
		dsn := srv.NewDatabaseFrom(t, tmpl)
		b, err := store.Open(ctx, dsn, t.TempDir())
		if err != nil {
			t.Fatalf("Open(postgres://…): %v", err)
		}
		defer b.Close()
		if b.Kind() != "postgres" {
			t.Errorf("Kind = %q", b.Kind())
		}
		alt := "postgresql://" + strings.TrimPrefix(dsn, "postgres://")
		b2, err := store.Open(ctx, alt, "")
		if err != nil {
			t.Fatalf("Open(postgresql://…): %v", err)
		}
		b2.Close()
		// A wrong password: refused, and not in the error.
		bad := strings.Replace(dsn, srv.Password, "wrong-secret-pw", 1)
		if _, err := store.Open(ctx, bad, ""); err == nil || strings.Contains(err.Error(), "wrong-secret-pw") {
			t.Errorf("Open with a wrong password: err = %v; want an error without the password", err)
		}
		// An unreachable server: the error names it, not the password.
		down := strings.Replace(dsn, ":"+strconv.Itoa(srv.Port), ":1", 1)
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := store.Open(ctx, down, ""); err == nil || strings.Contains(err.Error(), srv.Password) {
			t.Errorf("Open of a closed port: err = %v; want an error without the password", err)
		}
	})
	// A unique violation is a conflict, nothing else is.
	t.Run("ErrorKinds", func(t *testing.T) {
		s := fresh(t)
		defer s.Close()
		if err := s.CreatePool(ctx, &store.Pool{Name: "py", Size: 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreatePool(ctx, &store.Pool{Name: "py", Size: 1}); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("duplicate pool: %v", err)
		}
		if err := s.DeletePool(ctx, "default", "nope"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("unknown pool: %v", err)
		}
	})
}

func dbName(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Database
}

func pgExec(t *testing.T, dsn, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, dsn, sql string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
