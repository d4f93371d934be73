package pgtest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/internal/store/pgtest"
	"github.com/jackc/pgx/v5"
)

// The server answers on every address it was given, with the password,
// and each NewDatabase is a database of its own.
func TestStartListenNewDatabase(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, pgtest.Listen("127.0.0.1,127.0.0.2"))
	ctx := context.Background()
	if len(srv.Addresses) != 2 || srv.Host != "127.0.0.1" {
		t.Fatalf("Addresses %v, Host %s", srv.Addresses, srv.Host)
	}
	for _, host := range srv.Addresses {
		conn, err := pgx.Connect(ctx, srv.DSNFor(host, "forkbox"))
		if err != nil {
			t.Fatalf("connect through %s: %v", host, err)
		}
		conn.Close(ctx)
	}
	wrong := strings.Replace(srv.DSNFor("127.0.0.2", "forkbox"), srv.Password, "not-the-password", 1)
	if conn, err := pgx.Connect(ctx, wrong); err == nil {
		conn.Close(ctx)
		t.Fatalf("a wrong password was let in")
	}
	a, b := srv.NewDatabase(t), srv.NewDatabase(t)
	if a == b {
		t.Fatalf("NewDatabase twice: %s", a)
	}
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(ctx)
	if _, err := ca.Exec(ctx, `CREATE TABLE t (x int)`); err != nil {
		t.Fatal(err)
	}
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(ctx)
	var n int
	if err := cb.QueryRow(ctx, `SELECT COUNT(*) FROM pg_tables WHERE tablename = 't'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the second database sees the first's table: %d, %v", n, err)
	}
}

func TestBinDir(t *testing.T) {
	dir, err := pgtest.BinDir()
	if err != nil {
		t.Fatal(err) // names make setup
	}
	if !strings.HasPrefix(dir, "/usr/lib/postgresql/") {
		t.Errorf("BinDir = %s", dir)
	}
}
