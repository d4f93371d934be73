package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/forkbox/forkbox/internal/errdefs"
	"golang.org/x/sys/unix"
)

// File operations run with the sandbox user's filesystem identity (fsuid and
// fsgid on a thread of their own), so they see exactly the permissions its
// code sees, and new files belong to it. Every path is resolved with openat2
// beneath the sandbox root without magic links: a path with "..", a symlink
// with an absolute target or one that climbs out, and forkbox's own or the
// kernel's pseudo filesystems are refused with invalid_argument.

// forbidden are trees the files API does not serve.
var forbidden = []string{"/proc", "/sys", "/dev", Dir}

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
	for _, f := range forbidden {
		if p == f || strings.HasPrefix(p, f+"/") {
			return "", errdefs.InvalidArgument("path %q is outside the sandbox's filesystem", p)
		}
	}
	return p, nil
}

// pathErr maps a file-system errno to an API error.
func pathErr(p string, err error) error {
	switch {
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return errdefs.InvalidArgument("path %q leaves the sandbox through a symlink", p)
	case errors.Is(err, unix.ENOENT):
		return errdefs.NotFound("%s: no such file or directory", p)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS):
		return errdefs.PermissionDenied("%s: %v", p, err)
	case errors.Is(err, unix.EISDIR):
		return errdefs.InvalidArgument("%s is a directory", p)
	case errors.Is(err, unix.ENOTDIR):
		return errdefs.InvalidArgument("%s: a parent is not a directory", p)
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return errdefs.FailedPrecondition("%s: %v", p, err)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return errdefs.ResourceExhausted("%s: no space left on the sandbox disk", p)
	}
	return fmt.Errorf("%s: %w", p, err)
}

const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// openBeneath opens p (absolute in the sandbox) beneath the root.
func (s *server) openBeneath(p string, flags int, mode uint32) (int, error) {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}
	for {
		fd, err := unix.Openat2(s.rootFD, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// asUser runs fn on a thread whose filesystem identity is the sandbox user,
// then gives the thread back with root's identity (and with it the
// filesystem capabilities, which the kernel restores when fsuid returns to
// 0). If restoring fails, the thread stays locked and dies with the
// goroutine instead of going back to the pool with a changed identity.
// Reusing threads matters: a sandbox at its PID limit has no room for a new
// one.
func (s *server) asUser(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		unix.Setfsgid(s.cfg.GID)
		unix.Setfsuid(s.cfg.UID)
		ch <- fn()
		unix.Setfsuid(0)
		unix.Setfsgid(0)
		if uid, err := unix.SetfsuidRetUid(-1); err == nil && uid == 0 {
			if gid, err := unix.SetfsgidRetGid(-1); err == nil && gid == 0 {
				goruntime.UnlockOSThread()
			}
		}
	}()
	return <-ch
}

// reserveThreads makes the Go runtime start n OS threads now and keep them
// idle: the agent counts against the sandbox's PID limit, and a fork bomb
// that takes every free PID must not leave the runtime unable to create the
// thread it needs (which is fatal in Go).
func reserveThreads(n int) {
	var ready, release sync.WaitGroup
	ready.Add(n)
	release.Add(1)
	for i := 0; i < n; i++ {
		go func() {
			goruntime.LockOSThread() // each goroutine on a thread of its own
			ready.Done()
			release.Wait()
			goruntime.UnlockOSThread() // the thread stays, idle, for later use
		}()
	}
	ready.Wait()
	release.Done()
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
	var fd int
	err = s.asUser(func() error {
		var err error
		fd, err = s.openBeneath(p, unix.O_RDONLY, 0)
		return err
	})
	if err != nil {
		writeError(w, pathErr(p, err))
		return
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		writeError(w, pathErr(p, err))
		return
	}
	if !st.Mode().IsRegular() {
		writeError(w, errdefs.InvalidArgument("%s is not a regular file", p))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	io.Copy(w, f)
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
	tmp := fmt.Sprintf(".%s.forkbox-%d", name, time.Now().UnixNano())
	var dirFD, fd int
	err = s.asUser(func() error {
		if err := s.mkdirAll(dir); err != nil {
			return err
		}
		var err error
		if dirFD, err = s.openBeneath(dir, unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
			return pathErr(dir, err)
		}
		// Refuse to replace a directory or to write through a symlink.
		var st unix.Stat_t
		if err := unix.Fstatat(dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				return errdefs.InvalidArgument("%s is a directory", p)
			case unix.S_IFLNK:
				return errdefs.InvalidArgument("%s is a symlink; write to its target's path", p)
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
	f := os.NewFile(uintptr(fd), tmp)
	n, err := io.Copy(f, r.Body)
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
// Symlinks are removed, never followed.
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
		sub, err := unix.Openat(dirFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
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
	var entries []FileEntry
	err = s.asUser(func() error {
		fd, err := s.openBeneath(p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return pathErr(p, err)
		}
		d := os.NewFile(uintptr(fd), p)
		defer d.Close()
		names, err := d.Readdirnames(-1)
		if err != nil {
			return pathErr(p, err)
		}
		for _, n := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // vanished meanwhile
			}
			entries = append(entries, FileEntry{
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
		entries = []FileEntry{}
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
