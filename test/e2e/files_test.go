package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestFilesRoundTrip50MB(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	data := make([]byte, 50<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	res, err := shared.c.WriteFile(ctx, sb.ID, "data/blob.bin", bytes.NewReader(data), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if res.Size != int64(len(data)) || res.Path != "/workspace/data/blob.bin" {
		t.Fatalf("write result: %+v", res)
	}
	var got bytes.Buffer
	n, err := shared.c.ReadFileTo(ctx, sb.ID, "/workspace/data/blob.bin", &got)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("read back: %d bytes, %v", n, err)
	}
	if sha256.Sum256(got.Bytes()) != sha256.Sum256(data) {
		t.Fatal("downloaded bytes differ from the upload")
	}
	// The sandbox sees the same bytes, owned by the user, with the mode asked for.
	out := sh(t, shared, sb.ID, "sha256sum /workspace/data/blob.bin | cut -d' ' -f1; stat -c '%u %a' /workspace/data/blob.bin")
	want := sha256.Sum256(data)
	if !strings.HasPrefix(out.Stdout, hexs(want[:])) || !strings.Contains(out.Stdout, "1000 600") {
		t.Fatalf("inside the sandbox: %q", out.Stdout)
	}
	list, err := shared.c.ListFiles(ctx, sb.ID, "/workspace/data")
	if err != nil || len(list.Entries) != 1 || list.Entries[0].Name != "blob.bin" || list.Entries[0].Size != int64(len(data)) || list.Entries[0].Type != "file" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := shared.c.RemoveFile(ctx, sb.ID, "/workspace/data", false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("removing a non-empty dir without recursive: %v", err)
	}
	if err := shared.c.RemoveFile(ctx, sb.ID, "/workspace/data", true); err != nil {
		t.Fatal(err)
	}
	if _, err := shared.c.ReadFile(ctx, sb.ID, "/workspace/data/blob.bin"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("read after remove: %v, want not found", err)
	}
}

func hexs(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestFilesEscapesRefused: paths that would leave the sandbox's filesystem
// are refused with 400 and touch nothing, inside or on the host.
func TestFilesEscapesRefused(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	hostDir := t.TempDir()
	hostFile := filepath.Join(hostDir, "host.txt")
	os.WriteFile(hostFile, []byte("host data"), 0o644)
	sh(t, shared, sb.ID, "echo keep > /workspace/keep.txt; ln -s /etc /workspace/etc-link; ln -s ../../.. /workspace/up-link; ln -s "+hostDir+" /workspace/host-link; ln -s /proc/1/root /workspace/proc-link")
	ctx := ctxT(t)
	refused := []string{
		"../etc/passwd",
		"/workspace/../etc/passwd",
		"/workspace/etc-link/passwd",        // absolute symlink
		"/workspace/up-link/etc/hostname",   // relative symlink climbing above the root
		"/workspace/host-link/host.txt",     // symlink to a host path
		"/workspace/proc-link/etc/hostname", // symlink into /proc
		"/proc/1/root/etc/hostname",         // the kernel's view of another root
		"/proc/self/environ",
		"/sys/kernel/notes",
		"/.forkbox/run/agent.json", // forkbox's own files
		"/.forkbox/forkbox",
	}
	for _, p := range refused {
		t.Run("read "+p, func(t *testing.T) {
			_, err := shared.c.ReadFile(ctx, sb.ID, p)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("read %s: %v, want 400", p, err)
			}
		})
		t.Run("write "+p, func(t *testing.T) {
			_, err := shared.c.WriteFile(ctx, sb.ID, p, strings.NewReader("pwned"), 0o644)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("write %s: %v, want 400", p, err)
			}
		})
		t.Run("remove "+p, func(t *testing.T) {
			err := shared.c.RemoveFile(ctx, sb.ID, p, true)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("remove %s: %v, want 400", p, err)
			}
		})
	}
	// An absolute host path means that path inside the sandbox, where it does
	// not exist: reading it is not found, and never returns the host's file.
	if _, err := shared.c.ReadFile(ctx, sb.ID, hostFile); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("read of a host path: %v, want not found", err)
	}
	// Nothing was touched: the host file, the sandbox's files and /etc.
	if b, _ := os.ReadFile(hostFile); string(b) != "host data" {
		t.Fatalf("host file changed: %q", b)
	}
	out := sh(t, shared, sb.ID, "cat /workspace/keep.txt; grep -c pwned /etc/passwd; ls /workspace")
	if !strings.HasPrefix(out.Stdout, "keep\n0\n") || strings.Contains(out.Stdout, "pwned") {
		t.Fatalf("sandbox files after refused calls: %q", out.Stdout)
	}
	// Writing through a symlink inside the sandbox is refused too.
	if _, err := shared.c.WriteFile(ctx, sb.ID, "/workspace/etc-link", strings.NewReader("x"), 0o644); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("write onto a symlink: %v, want 400", err)
	}
}

func TestFilesPermissionsAreTheUsers(t *testing.T) {
	needRoot(t)
	sb := newSandbox(t, shared, api.CreateSandboxRequest{})
	ctx := ctxT(t)
	// The user cannot write the read-only image, and the files API acts as the user.
	if _, err := shared.c.WriteFile(ctx, sb.ID, "/usr/bin/evil", strings.NewReader("x"), 0o755); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("write into /usr: %v, want permission denied", err)
	}
	if _, err := shared.c.WriteFile(ctx, sb.ID, "/etc/passwd", strings.NewReader("x"), 0o644); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("write /etc/passwd: %v, want permission denied", err)
	}
	if b, err := shared.c.ReadFile(ctx, sb.ID, "/etc/hostname"); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("read /etc/hostname: %v", err)
	} else if err == nil && len(b) == 0 {
		t.Log("empty /etc/hostname")
	}
	if _, err := shared.c.ReadFile(ctx, sb.ID, "/workspace"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("read a directory: %v, want 400", err)
	}
}
