package runtime

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// An image may put a symlink where the runtime writes a file into a
// sandbox's root (/etc/resolv.conf): before, the daemon wrote through it as
// host root (a symlink to /etc/shadow would have rewritten the host's).
func TestWriteInRootNeverFollows(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown)")
	}
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "host-file")
	os.WriteFile(outside, []byte("host"), 0o644)
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	if err := os.Symlink(outside, filepath.Join(root, "etc", "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	if err := writeInRoot(root, "etc/resolv.conf", []byte("nameserver 10.0.0.1\n"), 0o644, 4242, 4243); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "host" {
		t.Fatalf("the host file was written through the symlink: %q", b)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(root, "etc", "resolv.conf"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 4242 || st.Gid != 4243 || st.Mode&0o777 != 0o644 {
		t.Fatalf("resolv.conf: mode %o owner %d:%d", st.Mode, st.Uid, st.Gid)
	}
	// A symlinked directory on the way is refused, not followed.
	os.RemoveAll(filepath.Join(root, "etc"))
	os.Symlink(filepath.Dir(outside), filepath.Join(root, "etc"))
	if err := writeInRoot(root, "etc/resolv.conf", []byte("x"), 0o644, 0, 0); err == nil {
		t.Fatal("wrote through a symlinked directory")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(outside), "resolv.conf")); err == nil {
		t.Fatal("a file appeared outside the root")
	}
}

// shiftOwners moves the ids of one range into another and leaves ids
// outside the range (and symlinks' targets) alone.
func TestShiftOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown)")
	}
	dir := t.TempDir()
	const from, to = 1 << 30, 1<<30 + 65536
	files := map[string][2]int{
		"root-owned": {from, from},
		"user-owned": {from + 1000, from + 1000},
		"foreign":    {7, 7},
	}
	for name, ids := range files {
		p := filepath.Join(dir, name)
		os.WriteFile(p, nil, 0o640)
		os.Chown(p, ids[0], ids[1])
	}
	unix.Chmod(filepath.Join(dir, "user-owned"), 0o4755)
	target := filepath.Join(t.TempDir(), "target")
	os.WriteFile(target, nil, 0o600)
	os.Symlink(target, filepath.Join(dir, "link"))
	os.Lchown(filepath.Join(dir, "link"), from+1000, from+1000)
	if err := shiftOwners(dir, from, to); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{"root-owned": to, "user-owned": to + 1000, "foreign": 7, "link": to + 1000}
	for name, uid := range want {
		var st unix.Stat_t
		unix.Lstat(filepath.Join(dir, name), &st)
		if st.Uid != uid || st.Gid != uid {
			t.Errorf("%s: %d:%d, want %d", name, st.Uid, st.Gid, uid)
		}
	}
	var st unix.Stat_t
	unix.Stat(filepath.Join(dir, "user-owned"), &st)
	if st.Mode&unix.S_ISUID == 0 {
		t.Error("the setuid bit was lost in the shift")
	}
	unix.Stat(target, &st)
	if st.Uid != 0 {
		t.Error("a symlink's target was chowned")
	}
}
