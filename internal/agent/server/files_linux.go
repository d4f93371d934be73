package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// File operations run with the sandbox user's filesystem identity (fsuid and
// fsgid on a thread of their own, see asUser), so they see exactly the
// permissions its code sees, and new files belong to it. Every path is
// resolved by the kernel with openat2 from the sandbox root (resolveFiles):
// it stays beneath the root and on the root's own mount, so /proc, /sys,
// /dev, /.forkbox and an image's read-only binds (the host image's /usr)
// cannot be reached by any route, whatever symlinks the user planted; such
// a path is refused with invalid_argument. Symlinks that stay on the root
// mount keep working, except absolute ones (RESOLVE_BENEATH refuses those).
// '..' in a path is refused outright. Only regular files are read or
// replaced and only directories listed: a FIFO, device or socket is refused
// before it is opened, so nothing can block or touch a device.

// forbidden are trees the files API does not serve. The kernel refuses them
// anyway (they are other mounts); naming them here gives a clearer error.
var forbidden = []string{"/proc", "/sys", "/dev", wire.Dir}

// cleanPath validates p (absolute, or relative to the workdir) and returns it
// absolute.
func (s *server) cleanPath(p string) (string, error) {
	if p == "" {
		return "", errdefs.InvalidArgument("path is required")
	}
	if strings.ContainsRune(p, 0) {
		return "", errdefs.InvalidArgument("path contains a NUL byte")
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", errdefs.InvalidArgument("path %q: '..' is not allowed", p)
		}
	}
	if !strings.HasPrefix(p, "/") {
		p = path.Join(s.cfg.WorkDir, p)
	}
	p = path.Clean(p)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a workdir of "" or a relative one
	}
	for _, f := range forbidden {
		if p == f || strings.HasPrefix(p, f+"/") {
			return "", errdefs.InvalidArgument("path %q is outside the sandbox's filesystem", p)
		}
	}
	return p, nil
}

// pathErr maps a file-system errno to an API error.
func pathErr(p string, err error) error {
	if status, _ := errdefs.HTTPStatus(err); status != http.StatusInternalServerError {
		return err // already an API error
	}
	switch {
	case errors.Is(err, unix.EXDEV):
		return errdefs.InvalidArgument("path %q leaves the sandbox's filesystem (an absolute symlink, one that climbs above /, or a way into /proc, /sys, /dev, /.forkbox or another mount)", p)
	case errors.Is(err, unix.ELOOP):
		return errdefs.InvalidArgument("path %q leaves the sandbox's filesystem through a symlink, or has too many symlinks", p)
	case errors.Is(err, unix.ENOENT):
		return errdefs.NotFound("%s: no such file or directory", p)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS):
		return errdefs.PermissionDenied("%s: %v", p, err)
	case errors.Is(err, unix.EISDIR):
		return errdefs.InvalidArgument("%s is a directory", p)
	case errors.Is(err, unix.ENOTDIR):
		return errdefs.InvalidArgument("%s: a parent is not a directory", p)
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST), errors.Is(err, unix.EBUSY):
		return errdefs.FailedPrecondition("%s: %v", p, err)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return errdefs.ResourceExhausted("%s: no space left on the sandbox disk", p)
	case errors.Is(err, unix.ENAMETOOLONG):
		return errdefs.InvalidArgument("%s: name too long", p)
	}
	return fmt.Errorf("%s: %w", p, err)
}

// openBeneath opens p (absolute in the sandbox) from the root, confined to
// the root mount (resolveFiles).
func (s *server) openBeneath(p string, flags int, mode uint32) (int, error) {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}
	return openat2(s.rootFD, rel, flags, mode, resolveFiles)
}

// openNode opens p for reading: a regular file, or a directory when dir is
// set. It first takes an O_PATH descriptor, which opens nothing (a FIFO
// does not block, a device is not touched), decides on its fstat, and only
// then opens that same file for reading. The caller runs as the user.
func (s *server) openNode(p string, dir bool) (*os.File, *unix.Stat_t, error) {
	pfd, err := s.openBeneath(p, unix.O_PATH, 0)
	if err != nil {
		return nil, nil, pathErr(p, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, nil, pathErr(p, err)
	}
	typ := st.Mode & unix.S_IFMT
	switch {
	case dir && typ != unix.S_IFDIR:
		return nil, nil, errdefs.InvalidArgument("%s is not a directory (it is a %s)", p, kindOf(st.Mode))
	case !dir && typ == unix.S_IFDIR:
		return nil, nil, errdefs.InvalidArgument("%s is a directory", p)
	case !dir && typ != unix.S_IFREG:
		return nil, nil, errdefs.InvalidArgument("%s is not a regular file (it is a %s)", p, kindOf(st.Mode))
	}
	flags := unix.O_RDONLY
	if dir {
		flags |= unix.O_DIRECTORY
	}
	fd, err := reopen(pfd, flags)
	if err != nil {
		return nil, nil, pathErr(p, err)
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || !sameFile(&st, &st2) {
		unix.Close(fd)
		return nil, nil, errdefs.FailedPrecondition("%s changed while it was being opened", p)
	}
	return os.NewFile(uintptr(fd), p), &st2, nil
}

// mkdirAll creates the directories of p beneath the root, as the user.
func (s *server) mkdirAll(p string) error {
	cur := "/"
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		if part == "" {
			continue
		}
		parent, err := s.openBeneath(cur, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return pathErr(cur, err)
		}
		err = unix.Mkdirat(parent, part, 0o755)
		unix.Close(parent)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return pathErr(path.Join(cur, part), err)
		}
		cur = path.Join(cur, part)
	}
	return nil
}

func (s *server) handleRead(w http.ResponseWriter, r *http.Request) {
	p, err := s.cleanPath(r.URL.Query().Get("path"))
	if err != nil {
		writeError(w, err)
		return
	}
	var f *os.File
	var st *unix.Stat_t
	err = s.asUser(func() error {
		var err error
		f, st, err = s.openNode(p, false)
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size, 10))
	// Exactly the announced length: a file that grows meanwhile is cut
	// there, one that shrinks ends the answer short (the client sees it).
	io.CopyN(w, f, st.Size)
}

// tempName is the name an upload is written under before it replaces
// name: random, so that nothing can be planted there ahead of it.
func tempName(name string) string {
	var b [8]byte
	rand.Read(b[:])
	return "." + name + ".forkbox-" + hex.EncodeToString(b[:])
}

func (s *server) handleWrite(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, err := s.cleanPath(q.Get("path"))
	if err != nil {
		writeError(w, err)
		return
	}
	if p == "/" {
		writeError(w, errdefs.InvalidArgument("cannot write to /"))
		return
	}
	mode := uint32(0o644)
	if m := q.Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o7777 {
			writeError(w, errdefs.InvalidArgument("mode %q is not an octal file mode", m))
			return
		}
		mode = uint32(v) & 0o777
	}
	dir, name := path.Split(p)
	tmp := tempName(name)
	var dirFD, fd int
	err = s.asUser(func() error {
		if err := s.mkdirAll(dir); err != nil {
			return err
		}
		var err error
		if dirFD, err = s.openBeneath(dir, unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
			return pathErr(dir, err)
		}
		// Replace only a regular file: not a directory, not a symlink (the
		// rename would replace the link, not write through it), not a
		// FIFO, device or socket.
		var st unix.Stat_t
		if err := unix.Fstatat(dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
			case unix.S_IFDIR:
				err = errdefs.InvalidArgument("%s is a directory", p)
			case unix.S_IFLNK:
				err = errdefs.InvalidArgument("%s is a symlink; write to its target's path", p)
			default:
				err = errdefs.InvalidArgument("%s is not a regular file (it is a %s)", p, kindOf(st.Mode))
			}
			if err != nil {
				unix.Close(dirFD)
				return err
			}
		}
		if fd, err = unix.Openat(dirFD, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, mode); err != nil {
			unix.Close(dirFD)
			return pathErr(p, err)
		}
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	defer unix.Close(dirFD)
	// The body streams into the temp file from an ordinary thread: the
	// descriptor carries the user's rights, and a slow upload holds no
	// thread of the user's.
	f := os.NewFile(uintptr(fd), tmp)
	n, copyErr := io.Copy(f, r.Body)
	// The mode (which the umask may have cut), the close and the rename into
	// place are the user's too: a rename as root would replace files the
	// user may not (another's file in a sticky directory like /tmp).
	err = s.asUser(func() error {
		err := copyErr
		if err == nil {
			err = f.Chmod(os.FileMode(mode))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = unix.Renameat(dirFD, tmp, dirFD, name)
		}
		if err != nil {
			unix.Unlinkat(dirFD, tmp, 0)
		}
		return err
	})
	if err != nil {
		writeError(w, pathErr(p, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"path": p, "size": n})
}

func (s *server) handleRemove(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, err := s.cleanPath(q.Get("path"))
	if err != nil {
		writeError(w, err)
		return
	}
	if p == "/" {
		writeError(w, errdefs.InvalidArgument("cannot remove /"))
		return
	}
	recursive := q.Get("recursive") == "true" || q.Get("recursive") == "1"
	dir, name := path.Split(p)
	err = s.asUser(func() error {
		dirFD, err := s.openBeneath(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return pathErr(dir, err)
		}
		defer unix.Close(dirFD)
		return s.removeAt(dirFD, name, p, recursive)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// removeAt removes name in dirFD, descending into directories when recursive.
// Symlinks, FIFOs, devices and sockets are unlinked like files, never
// followed or opened. The descent never crosses into another mount.
func (s *server) removeAt(dirFD int, name, p string, recursive bool) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr(p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dirFD, name, 0); err != nil {
			return pathErr(p, err)
		}
		return nil
	}
	if recursive {
		sub, err := openat2(dirFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveOwn)
		if err != nil {
			return pathErr(p, err)
		}
		d := os.NewFile(uintptr(sub), p)
		names, err := d.Readdirnames(-1)
		if err != nil {
			d.Close()
			return pathErr(p, err)
		}
		for _, n := range names {
			if err := s.removeAt(sub, n, path.Join(p, n), true); err != nil {
				d.Close()
				return err
			}
		}
		d.Close()
	}
	if err := unix.Unlinkat(dirFD, name, unix.AT_REMOVEDIR); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) {
			return errdefs.FailedPrecondition("%s is a non-empty directory; pass recursive=true", p)
		}
		return pathErr(p, err)
	}
	return nil
}

func (s *server) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	raw := q.Get("path")
	if raw == "" {
		raw = s.cfg.WorkDir
	}
	p, err := s.cleanPath(raw)
	if err != nil {
		writeError(w, err)
		return
	}
	var entries []wire.FileEntry
	err = s.asUser(func() error {
		d, _, err := s.openNode(p, true)
		if err != nil {
			return err
		}
		defer d.Close()
		names, err := d.Readdirnames(-1)
		if err != nil {
			return pathErr(p, err)
		}
		fd := int(d.Fd())
		for _, n := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // vanished meanwhile
			}
			entries = append(entries, wire.FileEntry{
				Name:    n,
				Path:    path.Join(p, n),
				Type:    fileType(st.Mode),
				Size:    st.Size,
				Mode:    fmt.Sprintf("%04o", st.Mode&0o7777),
				ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
			})
		}
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	if entries == nil {
		entries = []wire.FileEntry{}
	}
	sortEntries(entries)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"path": p, "entries": entries})
}

func fileType(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}
