// Package diskspacetest gives tests a filesystem small enough to fill: a
// tmpfs of a given size, mounted for the test and unmounted after it. It
// needs root (mount(2)); as any other user the test is skipped.
package diskspacetest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TmpFS mounts a tmpfs of size bytes on a new directory and returns it.
func TmpFS(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a small filesystem to fill takes mount(2): root only")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+strconv.FormatInt(size, 10)+",mode=0755"); err != nil {
		t.Fatalf("mount a tmpfs of %d bytes: %v", size, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file at path (replacing it) that leaves at most keep bytes
// of its filesystem free (tmpfs counts in pages), and returns a function
// that removes it.
func Fill(t testing.TB, path string, keep int64) (remove func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = 0xa5
	}
	left := int64(st.Bavail)*st.Bsize - keep
	for left > 0 {
		n := min(left, int64(len(chunk)))
		w, err := f.Write(chunk[:n])
		left -= int64(w)
		if err != nil {
			break // full already
		}
	}
	f.Close()
	return func() { os.Remove(path) }
}
