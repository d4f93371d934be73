// Package miniotest runs a real MinIO server for tests (no in-process
// fake): Start launches the binary that scripts/build-minio.sh builds
// (make setup) on a temporary directory and stops it when the test ends.
package miniotest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// DefaultBinary is where scripts/build-minio.sh installs MinIO.
const DefaultBinary = "/var/cache/forkbox/minio/v0.0.0-20260212201848-7aac2a2c5b7c/minio"

// Server is a running MinIO server with one bucket.
type Server struct {
	Endpoint  string // host:port of the S3 API
	Bucket    string
	AccessKey string
	SecretKey string
	// URL is an s3:// URL of the bucket for blob.Open (credentials in it,
	// plain HTTP).
	URL string
}

// URLWithPrefix is URL with a key prefix.
func (s *Server) URLWithPrefix(prefix string) string {
	u, _ := url.Parse(s.URL)
	u.Path = "/" + prefix
	return u.String()
}

// Binary is the MinIO binary tests use: $FORKBOX_MINIO, else DefaultBinary.
func Binary() string {
	if b := os.Getenv("FORKBOX_MINIO"); b != "" {
		return b
	}
	return DefaultBinary
}

// Start runs MinIO on addr (an IP to listen on; "" is 127.0.0.1) with free
// ports, waits until it is live, creates a bucket and stops the server in
// t.Cleanup. A missing binary fails the test (never a skip).
func Start(t testing.TB, addr string) *Server {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1"
	}
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("MinIO binary %s is missing (%v): run `make setup` (scripts/build-minio.sh builds it) or set FORKBOX_MINIO", bin, err)
	}
	data := t.TempDir()
	s := &Server{Bucket: "forkbox-test", AccessKey: "forkboxtest", SecretKey: "forkboxtest-secret-key"}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		apiPort, conPort := freePort(t, addr), freePort(t, addr)
		s.Endpoint = net.JoinHostPort(addr, strconv.Itoa(apiPort))
		err := s.run(t, bin, filepath.Join(data, strconv.Itoa(attempt)), net.JoinHostPort(addr, strconv.Itoa(conPort)))
		if err == nil {
			break
		}
		lastErr = err
		s.Endpoint = ""
	}
	if s.Endpoint == "" {
		t.Fatalf("start MinIO: %v", lastErr)
	}
	s.URL = (&url.URL{Scheme: "s3", User: url.UserPassword(s.AccessKey, s.SecretKey), Host: s.Bucket,
		RawQuery: url.Values{"endpoint": {s.Endpoint}, "secure": {"false"}, "region": {"us-east-1"}}.Encode()}).String()
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("MinIO at %s: make bucket %s: %v", s.Endpoint, s.Bucket, err)
	}
	return s
}

// run starts the server and waits until it is live; on failure (a port
// taken since freePort, say) it has stopped it again.
func (s *Server) run(t testing.TB, bin, data, console string) error {
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	var out syncBuffer
	cmd := exec.Command(bin, "server", data, "--address", s.Endpoint, "--console-address", console, "--quiet")
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1")
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, and killed if the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", bin, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	live := "http://" + s.Endpoint + "/minio/health/live"
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			return fmt.Errorf("MinIO exited (%v) before it was live: %s", err, out.String())
		default:
		}
		resp, err := http.Get(live)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("MinIO at %s not live after 30s: %s", s.Endpoint, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("MinIO output:\n%s", out.String())
		}
	})
	return nil
}

func freePort(t testing.TB, addr string) int {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatalf("find a free port on %s: %v", addr, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
