// Package diskspace turns a full filesystem of the host into an answer an
// operator can act on: HTTP 507 insufficient_storage (errdefs) naming the
// filesystem (its mount point and device, and the path forkbox was writing
// under), what the operation needed (forkbox's best estimate) and what was
// free, in IEC units (internal/units).
//
// Two moments meet a full disk. Up front, where the need can be estimated
// (a memory snapshot: the sandbox's memory and files; a layer: its files),
// Check refuses the operation before it starts (before a sandbox is
// frozen, before anything is written). Midway, when a write fails with
// ENOSPC (or EDQUOT) anyway, Map (for Go's own I/O) and Full (for a tool's
// failure that InOutput recognized: tar, cp, CRIU, debootstrap) give the
// same error with the numbers as of then. The caller removes what it had
// written; the error says nothing of its own cleanup.
//
// Only the host's filesystems are this package's business: a sandbox that
// fills its own disk (disk_mb) meets ENOSPC inside the sandbox, and a
// build step that does fails as the step's own error.
package diskspace

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/units"
)

// Room is the free space of the filesystem that holds a path.
type Room struct {
	// Path is the path asked about (the directory being written to).
	Path string
	// Mount is the mount point of the filesystem holding Path, FSType its
	// type and Device its source (a block device, or "tmpfs" and the like
	// for a filesystem without one); empty when unknown.
	Mount, FSType, Device string
	// Free is what may still be written (statfs's f_bavail, the space an
	// unprivileged writer gets), Total the filesystem's size, in bytes.
	Free, Total int64
}

// Error is a write that does not fit, or did not, on a filesystem of the
// host. It is errdefs.ErrInsufficientStorage (HTTP 507).
type Error struct {
	// What names the data being written: "a memory snapshot of sandbox
	// sbx_…", "layer 2/3 of image \"x\"".
	What string
	// Room is the filesystem, as measured when the error was made.
	Room Room
	// Need is the estimate of the bytes What takes (0: unknown); AtLeast
	// marks it as a lower bound (what had been written when the disk
	// filled, say).
	Need    int64
	AtLeast bool
	// Midway: the write failed for want of space; otherwise the operation
	// was refused before it wrote anything.
	Midway bool
	// Cause is the failure that was met midway (nil up front), for the
	// daemon's log; it is not part of the message, nor of Unwrap.
	Cause error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Midway {
		fmt.Fprintf(&b, "the disk filled up while writing %s", e.What)
	} else {
		fmt.Fprintf(&b, "not enough disk space for %s", e.What)
	}
	b.WriteString(": ")
	switch {
	case e.Need > 0 && e.AtLeast:
		fmt.Fprintf(&b, "it needs more than %s, and ", units.Bytes(e.Need))
	case e.Need > 0:
		fmt.Fprintf(&b, "it needs about %s, and ", units.Bytes(e.Need))
	}
	b.WriteString(e.Room.describe())
	if e.Room.Total > 0 {
		verb := "has"
		if e.Midway {
			verb = "had"
		}
		fmt.Fprintf(&b, " %s %s free of %s", verb, units.Bytes(max(e.Room.Free, 0)), units.Bytes(e.Room.Total))
	} else {
		b.WriteString(" is full")
	}
	b.WriteString("; free space there and try again")
	return b.String()
}

// describe names the filesystem: "the filesystem at /srv (ext4 on
// /dev/vdb), which holds /srv/forkbox/snapshots,".
func (r Room) describe() string {
	if r.Mount == "" {
		return "the filesystem holding " + r.Path
	}
	s := "the filesystem at " + r.Mount
	switch {
	case r.Device != "" && r.Device != r.FSType && r.FSType != "":
		s += " (" + r.FSType + " on " + r.Device + ")"
	case r.Device != "":
		s += " (" + r.Device + ")"
	case r.FSType != "":
		s += " (" + r.FSType + ")"
	}
	if r.Path != "" && r.Path != r.Mount {
		s += ", which holds " + r.Path + ","
	}
	return s
}

// Unwrap makes the error errdefs.ErrInsufficientStorage, and only that:
// Cause may be of another kind that the HTTP mapping would find first.
func (e *Error) Unwrap() error { return errdefs.ErrInsufficientStorage }

// Check refuses an operation that needs need bytes under path (What: what)
// when the filesystem holding path has less free. It lets the operation
// go on when it cannot tell (the path is not there, statfs fails): a
// write that then fails is mapped by Map or Full.
func Check(path, what string, need int64) error {
	if need <= 0 {
		return nil
	}
	r, err := Of(lasting(path))
	if err != nil || r.Free >= need {
		return nil
	}
	return &Error{What: what, Room: r, Need: need}
}

// IsFull says whether err is a write that failed for want of space: ENOSPC
// or EDQUOT anywhere in its chain, or an *Error. An error carried as text
// (a tool's output, an answer from a sandbox) is not: see InOutput.
func IsFull(err error) bool {
	var e *Error
	return errors.As(err, &e) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// InOutput says whether a host tool's output (tar, cp, debootstrap, CRIU's
// log) reports a full disk.
func InOutput(out string) bool {
	return strings.Contains(out, "No space left on device") || strings.Contains(out, "Disk quota exceeded")
}

// Full is the error of what, which ran out of room writing under path:
// need is the estimate of what it needed (0: unknown; atLeast: a lower
// bound), the free space is measured now, and cause (kept for the log) is
// what failed.
func Full(path, what string, need int64, atLeast bool, cause error) error {
	path = lasting(path)
	r, err := Of(path)
	if err != nil {
		r = Room{Path: path}
	}
	return &Error{What: what, Room: r, Need: need, AtLeast: atLeast, Midway: true, Cause: cause}
}

// lasting is path up to its first temporary entry (".tmp-…", the stores'
// names for what they are writing, which is gone by the time anyone reads
// the error): the store's own directory.
func lasting(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ".tmp") {
			if i == 1 && parts[0] == "" {
				return "/"
			}
			return strings.Join(parts[:i], "/")
		}
	}
	return path
}

// Map returns Full(path, what, need, false, err) when err IsFull and is not
// already an *Error, else err unchanged (nil included).
func Map(err error, path, what string, need int64) error {
	if err == nil || !IsFull(err) {
		return err
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return Full(path, what, need, false, err)
}
