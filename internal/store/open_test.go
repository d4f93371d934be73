package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/internal/store"
)

func TestOpenSQLiteForms(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, dsn := range []string{"", "sqlite"} {
		b, err := store.Open(ctx, dsn, dir)
		if err != nil {
			t.Fatalf("Open(%q): %v", dsn, err)
		}
		if b.Kind() != "sqlite" {
			t.Errorf("Open(%q).Kind() = %q", dsn, b.Kind())
		}
		b.Close()
		if _, err := os.Stat(filepath.Join(dir, "forkbox.db")); err != nil {
			t.Errorf("Open(%q) did not use dataDir/forkbox.db: %v", dsn, err)
		}
	}
	path := filepath.Join(t.TempDir(), "elsewhere.db")
	b, err := store.Open(ctx, "sqlite://"+path, dir)
	if err != nil {
		t.Fatalf("Open(sqlite://%s): %v", path, err)
	}
	b.Close()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("sqlite:// DSN did not open %s: %v", path, err)
	}
	if _, err := store.Open(ctx, "sqlite://relative.db", dir); err == nil {
		t.Errorf("Open(sqlite://relative.db) succeeded; want an absolute path")
	}
}

func TestOpenRejectsUnknownWithoutSecrets(t *testing.T) {
	for _, dsn := range []string{"mysql://root:hunter2secret@db/forkbox", "hunter2secret", "postgres-ish://u:hunter2secret@h/db", "file:///x.db"} {
		_, err := store.Open(context.Background(), dsn, t.TempDir())
		if err == nil {
			t.Fatalf("Open(%q) succeeded", dsn)
		}
		msg := err.Error()
		if strings.Contains(msg, "hunter2secret") {
			t.Errorf("Open(%q) error shows the password: %s", dsn, msg)
		}
		for _, want := range []string{"sqlite", "sqlite:///", "postgres://"} {
			if !strings.Contains(msg, want) {
				t.Errorf("Open(%q) error %q does not name the accepted form %q", dsn, msg, want)
			}
		}
	}
}

func TestOpenPostgresBadDSNWithoutSecrets(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // nothing is reached
	for _, dsn := range []string{
		"postgres://forkbox:hunter2secret@127.0.0.1:1/forkbox?sslmode=disable",
		"postgresql://forkbox:hunter2secret@127.0.0.1:1/forkbox?connect_timeout=notanumber",
		"postgres://forkbox@127.0.0.1:1/forkbox?password=hunter2secret&sslmode=bogus",
		"postgres://forkbox:hunter2secret@[::1/forkbox",
	} {
		_, err := store.Open(ctx, dsn, "")
		if err == nil {
			t.Fatalf("Open(%q) succeeded", dsn)
		}
		if strings.Contains(err.Error(), "hunter2secret") {
			t.Errorf("Open error shows the password: %s", err)
		}
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p4ss@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://u@h/db":                           "postgres://u@h/db",
		"postgres://u@h/db?password=p4ss":             "postgres://u@h/db?password=xxxxx",
	} {
		if got := store.RedactDSN(in); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
	}
	if got := store.RedactDSN("postgres://u:p4ss@[::1/db"); strings.Contains(got, "p4ss") {
		t.Errorf("RedactDSN of an unparsable DSN = %q", got)
	}
}
