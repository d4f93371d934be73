package diskspace

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	r, err := Of(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(dir, "x", 1); err != nil {
		t.Fatalf("a byte does not fit in %+v: %v", r, err)
	}
	if err := Check(dir, "x", 0); err != nil {
		t.Fatalf("no need: %v", err)
	}
	err = Check(filepath.Join(dir, "not", "yet"), "a huge thing", r.Total+1<<40)
	var e *Error
	if !errors.As(err, &e) || e.Midway || e.Need != r.Total+1<<40 || !strings.HasPrefix(err.Error(), "not enough disk space for a huge thing: it needs about ") {
		t.Fatalf("Check of more than the filesystem: %v", err)
	}
	if e.Room.Path != filepath.Join(dir, "not", "yet") || e.Room.Mount == "" {
		t.Fatalf("room of a path not there yet: %+v", e.Room)
	}
}

func TestOf(t *testing.T) {
	r, err := Of("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	if r.Mount != "/proc" || r.FSType != "proc" {
		t.Fatalf("Of(/proc/self): %+v", r)
	}
	if _, err := os.Stat("/dev/shm"); err == nil {
		r, err := Of("/dev/shm")
		if err != nil || r.Mount != "/dev/shm" || r.FSType != "tmpfs" || r.Total == 0 {
			t.Fatalf("Of(/dev/shm): %+v %v", r, err)
		}
	}
}

func TestMountOf(t *testing.T) {
	info := strings.Join([]string{
		"22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw",
		"30 22 0:25 / /srv rw shared:2 - tmpfs tmpfs rw,size=1024k",
		"31 22 254:16 / /srv/big\\040disk rw shared:3 - ext4 /dev/vdb rw",
		"32 31 254:16 /sub /srv/big\\040disk/bound rw shared:3 - ext4 /dev/vdb rw",
		"33 22 0:40 / /var/lib/forkbox rw - btrfs /dev/vdc rw,subvol=/",
		"bad line",
	}, "\n")
	for _, tc := range []struct {
		path         string
		major, minor uint32
		mount, dev   string
	}{
		{"/srv/big disk/snapshots", 254, 16, "/srv/big disk", "/dev/vdb"},
		{"/srv/big disk/bound/x", 254, 16, "/srv/big disk/bound", "/dev/vdb"},
		{"/srv/other", 0, 25, "/srv", "tmpfs"},
		{"/srvx", 254, 1, "/", "/dev/vda1"},
		// A btrfs subvolume reports a device of its own: the longest
		// mount point then.
		{"/var/lib/forkbox/snapshots", 0, 99, "/var/lib/forkbox", "/dev/vdc"},
	} {
		mount, _, dev := mountOf(bufioScanner(info), tc.path, tc.major, tc.minor)
		if mount != tc.mount || dev != tc.dev {
			t.Errorf("mountOf(%s) = %q %q, want %q %q", tc.path, mount, dev, tc.mount, tc.dev)
		}
	}
}

func bufioScanner(s string) *bufio.Scanner { return bufio.NewScanner(strings.NewReader(s)) }
