package store

import "database/sql"

// NumMigrations is the number of known schema migrations, i.e. the version a
// freshly opened database must be at.
var NumMigrations = len(migrations)

// RawDB exposes the handle underneath a SQLite store to the tests.
func RawDB(s *SQLite) *sql.DB { return s.db }

// NumPostgresMigrations is the version a freshly opened PostgreSQL database
// must be at.
var NumPostgresMigrations = len(pgMigrations)
