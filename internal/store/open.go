package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// Open opens the metadata store a daemon is configured with:
//
//	""  or "sqlite"                      SQLite at dataDir/forkbox.db
//	"sqlite:///path/to/forkbox.db"       SQLite at that file
//	"postgres://user:pass@host:5432/db"  PostgreSQL (also postgresql://)
//
// A DSN's password never appears in the errors it returns.
func Open(ctx context.Context, dsn, dataDir string) (Backend, error) {
	switch {
	case dsn == "" || dsn == "sqlite":
		if dataDir == "" {
			return nil, errors.New("metadata store: sqlite needs a data directory")
		}
		return OpenSQLite(ctx, filepath.Join(dataDir, "forkbox.db"))
	case strings.HasPrefix(dsn, "sqlite://"):
		path := strings.TrimPrefix(dsn, "sqlite://")
		if !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("metadata store %q: want sqlite:///absolute/path", dsn)
		}
		return OpenSQLite(ctx, path)
	case strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://"):
		s, err := OpenPostgres(ctx, dsn)
		if err != nil {
			return nil, &redactedError{err: fmt.Errorf("metadata store %s: %w", RedactDSN(dsn), err), secrets: dsnSecrets(dsn)}
		}
		return s, nil
	default:
		// Only the scheme is shown: the rest may hold a password in any form.
		what := "without a scheme"
		if i := strings.Index(dsn, "://"); i > 0 && !strings.ContainsAny(dsn[:i], ":@/ =") {
			what = fmt.Sprintf("of scheme %q", dsn[:i])
		}
		return nil, fmt.Errorf(`metadata store DSN %s: unknown kind; want "sqlite", "sqlite:///path/to/forkbox.db" or "postgres://user:password@host:port/db"`, what)
	}
}

// RedactDSN returns dsn with its password (in the userinfo or a password
// parameter) replaced by "xxxxx", for logs and errors.
func RedactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		// Unparsable: show only what comes before any userinfo.
		if i := strings.Index(dsn, "://"); i >= 0 {
			return dsn[:i+3] + "…"
		}
		return "…"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// dsnSecrets are the passwords a DSN carries, as written and unescaped.
func dsnSecrets(dsn string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 {
			out = append(out, s)
		}
	}
	if u, err := url.Parse(dsn); err == nil {
		if u.User != nil {
			if pw, ok := u.User.Password(); ok {
				add(pw)
				add(url.PathEscape(pw))
				add(url.QueryEscape(pw))
			}
		}
		if pw := u.Query().Get("password"); pw != "" {
			add(pw)
			add(url.QueryEscape(pw))
		}
	}
	return out
}

// redactedError is err with every secret blanked out of its message; it
// still unwraps to err for errors.Is.
type redactedError struct {
	err     error
	secrets []string
}

func (e *redactedError) Error() string {
	msg := e.err.Error()
	for _, s := range e.secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return msg
}

func (e *redactedError) Unwrap() error { return e.err }
