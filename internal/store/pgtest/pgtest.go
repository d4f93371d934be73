// Package pgtest runs a throwaway PostgreSQL server for tests: Debian's
// PostgreSQL binaries (scripts/setup.sh installs them; `make setup`) in a
// temporary directory, on a port and socket directory of its own, with
// fsync off. It stops, and its directory goes, when the test ends.
//
//	srv := pgtest.Start(t)
//	s, err := store.OpenPostgres(ctx, srv.NewDatabase(t)) // empty, private
//
// As root the server runs as the postgres user (initdb refuses root).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a running throwaway PostgreSQL server.
type Server struct {
	// Host is the first address it listens on; Port its TCP port.
	Host string
	Port int
	// Addresses are all the addresses it listens on.
	Addresses []string
	// User and Password are the superuser's (TCP connections from any
	// address need the password, md5; the socket in SocketDir trusts local
	// connections).
	User, Password string
	// SocketDir holds its Unix socket.
	SocketDir string
	// DSN names the database "forkbox" it was started with, on Host.
	DSN string

	dir    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	next   atomic.Int64
}

type config struct {
	listen  string
	durable bool
}

// Option configures Start.
type Option func(*config)

// Listen sets the addresses the server listens on, comma-separated as
// PostgreSQL's listen_addresses ("127.0.0.1,10.77.0.1"); the default is
// "127.0.0.1". Clients from any address may connect with the password
// (pg_hba.conf: host all all 0.0.0.0/0 md5, and ::/0).
func Listen(addresses string) Option { return func(c *config) { c.listen = addresses } }

// Durable keeps PostgreSQL's defaults of fsync, synchronous_commit and
// full_page_writes (on), as a production server runs, for benchmarks.
func Durable() Option { return func(c *config) { c.durable = true } }

// Start starts a server and stops it when t ends. Missing binaries fail the
// test: run `make setup`.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg := config{listen: "127.0.0.1"}
	for _, o := range opts {
		o(&cfg)
	}
	bin, err := BinDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: running as root needs the postgres user (run `make setup`): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}

	// Not t.TempDir: its parents are 0700 root's, closed to postgres.
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	for _, d := range []string{data, sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		if cred != nil {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatalf("pgtest: %v", err)
			}
		}
	}
	s := &Server{User: "postgres", Password: randomHex(12), SocketDir: sock, dir: dir}
	for _, a := range strings.Split(cfg.listen, ",") {
		if a = strings.TrimSpace(a); a != "" {
			s.Addresses = append(s.Addresses, a)
		}
	}
	if len(s.Addresses) == 0 {
		t.Fatalf("pgtest: no address to listen on in %q", cfg.listen)
	}
	s.Host = s.Addresses[0]

	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", s.User,
		"--auth-local=trust", "--auth-host=md5", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	_, err = hba.WriteString("host all all 0.0.0.0/0 md5\nhost all all ::/0 md5\n")
	if cerr := hba.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("pgtest: pg_hba.conf: %v", err)
	}

	// A free port can be taken between choosing and binding it: try again.
	var lastErr error
	for range 3 {
		if lastErr = s.start(bin, data, cfg, cred); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("pgtest: %v", lastErr)
	}
	t.Cleanup(s.stop)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The password is kept as md5 and checked so (md5 in pg_hba.conf): a
	// SCRAM exchange costs a client ~100 ms of PBKDF2 under the race
	// detector, on every connection.
	if err := s.exec(ctx, "postgres", `SET password_encryption = 'md5'; ALTER ROLE `+s.User+` PASSWORD '`+s.Password+`'`); err != nil {
		t.Fatalf("pgtest: set the password: %v", err)
	}
	if err := s.exec(ctx, "postgres", `CREATE DATABASE forkbox`); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s.DSN = s.DSNFor(s.Host, "forkbox")
	return s
}

// BinDir finds the newest installed PostgreSQL's binaries
// (/usr/lib/postgresql/<version>/bin).
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var found []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
				found = append(found, d)
			}
		}
	}
	if len(found) == 0 {
		return "", errors.New("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin: run `make setup` (scripts/setup.sh installs Debian's postgresql package)")
	}
	version := func(d string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return v
	}
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	return found[0], nil
}

func (s *Server) start(bin, data string, cfg config, cred *syscall.Credential) error {
	listen := cfg.listen
	port, err := freePort()
	if err != nil {
		return err
	}
	logPath := filepath.Join(s.dir, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", s.SocketDir,
		"-c", "listen_addresses=" + listen,
		"-c", "max_connections=300", "-c", "shared_buffers=32MB",
		"-c", "log_min_messages=warning"}
	if !cfg.durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: a test binary that dies takes its server along. The
	// signal comes when the thread that started the server ends, so a
	// goroutine holds that thread until the server has exited.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			cmd.Wait()
			close(exited)
		}
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.exited = exited
	s.Port = port
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.exec(ctx, "postgres", `SELECT 1`)
		cancel()
		if err == nil {
			s.cmd = cmd
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres exited while starting (port %d): %s", port, log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres not ready after 30s: %v; log:\n%s", err, log)
		}
	}
}

// stop shuts the server down fast (SIGINT), or kills it.
func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// DSNFor is the URL of database db through host (one of Addresses).
func (s *Server) DSNFor(host, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(s.User, s.Password),
		Host: net.JoinHostPort(host, strconv.Itoa(s.Port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// NewDatabase creates an empty database of its own for one test and
// returns its DSN. It is left behind when t ends: the server and all its
// databases go when the test that started it ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	return s.NewDatabaseFrom(t, "template1")
}

// NewDatabaseFrom is NewDatabase with a copy of database template (say, one
// already migrated; nothing may be connected to it) instead of an empty one.
func (s *Server) NewDatabaseFrom(t testing.TB, template string) string {
	t.Helper()
	name := fmt.Sprintf("test_%d", s.next.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// FILE_COPY copies files instead of logging every page: with fsync
	// off, twice as fast.
	q := `CREATE DATABASE ` + name + ` TEMPLATE ` + pgx.Identifier{template}.Sanitize() + ` STRATEGY FILE_COPY`
	if err := s.exec(ctx, "postgres", q); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s.DSNFor(s.Host, name)
}

// Exec runs sql (statements without parameters) in database db as the
// superuser, through the socket.
func (s *Server) Exec(ctx context.Context, db, sql string) error { return s.exec(ctx, db, sql) }

func (s *Server) exec(ctx context.Context, db, sql string) error {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", s.SocketDir, s.Port, s.User, db))
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
