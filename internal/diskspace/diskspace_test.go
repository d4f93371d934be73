package diskspace

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/forkbox/forkbox/internal/errdefs"
)

var room = Room{Path: "/srv/forkbox/snapshots", Mount: "/srv", FSType: "ext4", Device: "/dev/vdb",
	Free: 300 << 20, Total: 10 << 30}

func TestMessageUpFront(t *testing.T) {
	e := &Error{What: "a memory snapshot of sandbox sbx_1", Room: room, Need: 812 << 20}
	want := "not enough disk space for a memory snapshot of sandbox sbx_1: it needs about 812.0 MiB, and " +
		"the filesystem at /srv (ext4 on /dev/vdb), which holds /srv/forkbox/snapshots, has 300.0 MiB free of 10.0 GiB; " +
		"free space there and try again"
	if e.Error() != want {
		t.Fatalf("message:\n%s\nwant:\n%s", e.Error(), want)
	}
	if st, code := errdefs.HTTPStatus(fmt.Errorf("checkpoint: %w", e)); st != http.StatusInsufficientStorage || code != "insufficient_storage" {
		t.Fatalf("status %d %s, want 507 insufficient_storage", st, code)
	}
}

func TestMessageMidway(t *testing.T) {
	r := room
	r.Path, r.Mount, r.FSType, r.Device, r.Free = "/data", "/data", "tmpfs", "tmpfs", 12<<10
	for _, tc := range []struct {
		e    *Error
		want string
	}{
		{&Error{What: "upload sales.csv", Room: r, Need: 5 << 20, AtLeast: true, Midway: true},
			"the disk filled up while writing upload sales.csv: it needs more than 5.0 MiB, and the filesystem at /data (tmpfs) had 12.0 KiB free of 10.0 GiB; free space there and try again"},
		{&Error{What: "the manifest of snapshot snap_1", Room: r, Midway: true},
			"the disk filled up while writing the manifest of snapshot snap_1: the filesystem at /data (tmpfs) had 12.0 KiB free of 10.0 GiB; free space there and try again"},
		{&Error{What: "layer 1/1", Room: Room{Path: "/x/images"}, Midway: true},
			"the disk filled up while writing layer 1/1: the filesystem holding /x/images is full; free space there and try again"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("message:\n%s\nwant:\n%s", got, tc.want)
		}
	}
}

// TestCauseOfAnotherKind: a cause that is itself of a kind the table maps
// first (resource_exhausted) does not turn the answer into a 429.
func TestCauseOfAnotherKind(t *testing.T) {
	e := &Error{What: "x", Room: room, Midway: true, Cause: errdefs.ResourceExhausted("no space left")}
	if st, _ := errdefs.HTTPStatus(e); st != http.StatusInsufficientStorage {
		t.Fatalf("status %d, want 507", st)
	}
}

func TestIsFullAndMap(t *testing.T) {
	dir := t.TempDir()
	enospc := &fs.PathError{Op: "write", Path: filepath.Join(dir, "f"), Err: syscall.ENOSPC}
	for _, tc := range []struct {
		err  error
		full bool
	}{
		{enospc, true},
		{fmt.Errorf("commit layer: %w", enospc), true},
		{&fs.PathError{Op: "write", Path: "f", Err: syscall.EDQUOT}, true},
		{&Error{What: "x"}, true},
		{syscall.EIO, false},
		// Text is not a typed ENOSPC: a build step's output that says it
		// (its own disk filled) stays the step's error.
		{errdefs.InvalidArgument("step 1/1 (run) failed: No space left on device"), false},
		{nil, false},
	} {
		if got := IsFull(tc.err); got != tc.full {
			t.Errorf("IsFull(%v) = %v, want %v", tc.err, got, tc.full)
		}
	}

	got := Map(fmt.Errorf("write fs.tar: %w", enospc), dir, "a filesystem snapshot of sandbox sbx_1", 42<<20)
	var e *Error
	if !errors.As(got, &e) || !e.Midway || e.Need != 42<<20 || e.Room.Path != dir || e.Room.Total == 0 || !errors.Is(e.Cause, syscall.ENOSPC) {
		t.Fatalf("Map: %#v", got)
	}
	if !errors.Is(got, errdefs.ErrInsufficientStorage) {
		t.Fatalf("Map's error is not insufficient storage: %v", got)
	}
	// Already mapped: kept as it is (the numbers of where it was made).
	wrapped := fmt.Errorf("suspend: %w", got)
	if again := Map(wrapped, "/elsewhere", "other", 1); again != wrapped {
		t.Fatalf("Map of a mapped error: %v", again)
	}
	other := errors.New("boom")
	if Map(other, dir, "x", 1) != other || Map(nil, dir, "x", 1) != nil {
		t.Fatal("Map changed an error that is not a full disk")
	}
}

func TestInOutput(t *testing.T) {
	for out, want := range map[string]bool{
		"tar: ./big: Wrote only 4096 of 10240 bytes\ntar: Error is not recoverable: exiting now: No space left on device": true,
		"Error (criu/page-xfer.c:533): Can't write pages: Disk quota exceeded":                                            true,
		"tar: ./x: Cannot open: Permission denied":                                                                        false,
	} {
		if InOutput(out) != want {
			t.Errorf("InOutput(%q) = %v", out, !want)
		}
	}
}

func TestLasting(t *testing.T) {
	for in, want := range map[string]string{
		"/data/snapshots/.tmp-snap_1":               "/data/snapshots",
		"/data/snapshots/.tmp-snap_1/criu":          "/data/snapshots",
		"/images/.layers/.tmp-4242-99/fs/.tmp-x":    "/images/.layers",
		"images/.tmp-1-import-2":                    "images",
		"/images/.layers/.tmp-4242-99/.tmp.evict-1": "/images/.layers",
		"/.tmp-x": "/",
		"/data":   "/data",
	} {
		if got := lasting(in); got != want {
			t.Errorf("lasting(%s) = %s, want %s", in, got, want)
		}
	}
}
