package server

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Sandbox code can create, replace and rename files anywhere the sandbox
// user may write, at any moment, including while the agent works on them.
// So the agent never opens, creates, stats, renames or chowns such a path
// with root's authority. Either the work runs with the user's credentials
// (fsuid and fsgid on a thread of its own, see asUser), so it can do no more
// than the user's own code could, or it walks descriptors opened with
// openat2 that refuse symlinks, magic links and mount crossings, and then
// works on those descriptors (fstat, fchown), never on names again.

// Resolution flags for openat2.
const (
	// resolveFiles confines the files API to the sandbox's root mount:
	// nothing above the root (an absolute symlink or one that climbs out is
	// refused), no /proc magic links, and no other mount, so /proc, /sys,
	// /dev, /.forkbox and an image's read-only binds are out of reach by any
	// route. Symlinks that stay inside keep working.
	resolveFiles = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV
	// resolveOwn is for the agent's own paths (the workdir, the kernels'
	// runtime directory and log), which never involve a symlink: one there
	// was planted.
	resolveOwn = resolveFiles | unix.RESOLVE_NO_SYMLINKS
)

// openat2 is openat2(2) with O_CLOEXEC, retried when the kernel asks (a
// rename raced with the resolution), a bounded number of times so that a
// process renaming in a loop cannot hold the agent.
func openat2(dirfd int, p string, flags int, mode uint32, resolve uint64) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, p, how)
		if (err == unix.EINTR || err == unix.EAGAIN) && i < 100 {
			continue
		}
		return fd, err
	}
}

// reopen opens, with flags, the file that an O_PATH descriptor refers to:
// what was checked through fd is what gets opened, with no path to swap in
// between. The magic link in /proc/self/fd is the agent's own; permission is
// checked against the file with the calling thread's credentials.
func reopen(fd int, flags int) (int, error) {
	for {
		nfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err == unix.EINTR {
			continue
		}
		return nfd, err
	}
}

// sameFile reports whether two stats are of one inode.
func sameFile(a, b *unix.Stat_t) bool { return a.Dev == b.Dev && a.Ino == b.Ino }

// kindOf names a file type for error messages.
func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFSOCK:
		return "socket"
	}
	return "special file"
}

// asUser runs fn on a thread whose filesystem identity is the sandbox user,
// then gives the thread back with root's identity and the agent's
// capability sets. A thread whose identity cannot be switched, or restored,
// stays locked and dies with the goroutine instead of going back to the
// pool in an unknown state; fn does not run on a thread that did not
// switch. Reusing threads matters: a sandbox at its PID limit has no room
// for a new one.
func (s *server) asUser(fn func() error) error {
	return s.asIdentity(s.cfg.UID, s.cfg.GID, fn)
}

func (s *server) asIdentity(uid, gid int, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		if err := setFSIdentity(uid, gid); err != nil {
			ch <- err
			return // the thread ends with the goroutine
		}
		clean := false
		defer func() {
			if p := recover(); p != nil {
				ch <- fmt.Errorf("internal error: %v", p)
				return // the thread ends with the goroutine
			}
			if clean {
				goruntime.UnlockOSThread()
			}
		}()
		ch <- fn()
		clean = s.restoreRoot()
	}()
	return <-ch
}

// setFSIdentity switches the calling thread's fsuid and fsgid and checks
// that they switched (setfsuid reports no failure).
func setFSIdentity(uid, gid int) error {
	unix.Setfsgid(gid)
	unix.Setfsuid(uid)
	gotU, errU := unix.SetfsuidRetUid(-1)
	gotG, errG := unix.SetfsgidRetGid(-1)
	if errU != nil || errG != nil || gotU != uid || gotG != gid {
		return fmt.Errorf("cannot act as uid %d gid %d (fsuid %d, fsgid %d)", uid, gid, gotU, gotG)
	}
	return nil
}

// restoreRoot gives the calling thread back root's filesystem identity and
// the agent's capability sets; false if it could not.
func (s *server) restoreRoot() bool {
	if setFSIdentity(0, 0) != nil {
		return false
	}
	if s.caps != nil && !restoreThreadCaps(*s.caps) {
		return false
	}
	return true
}

// onUserThread reports whether the calling goroutine runs on a thread of
// asUser. Such threads run only their own locked goroutine, so a goroutine
// that is not on one sees root's fsuid here, wherever it is moved.
func (s *server) onUserThread() bool {
	if s.cfg.UID == 0 {
		return false
	}
	uid, err := unix.SetfsuidRetUid(-1)
	if err != nil || uid != s.cfg.UID {
		return false
	}
	gid, err := unix.SetfsgidRetGid(-1)
	return err == nil && gid == s.cfg.GID
}

// userDo runs fn with the user's filesystem identity: directly when the
// caller already is on such a thread (the kernel package calls the launcher
// from the goroutine that asked it to start a kernel), else through asUser.
func (s *server) userDo(fn func() error) error {
	if s.onUserThread() {
		return fn()
	}
	return s.asUser(fn)
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

// A thread of the agent passes the kernel's ptrace checks on the agent
// itself whatever its fsuid (it is in the same thread group), so /proc/1/root,
// /proc/1/cwd and /proc/1/fd/* lead somewhere for it and nowhere for the
// user's processes. Lookups done on the user's behalf therefore never follow
// a magic link: the answer is what the user's own process would get.

// statAsCaller stats p with the calling thread's identity, following
// ordinary symlinks but no magic link; it returns an O_PATH descriptor on
// it, which the caller closes.
func statAsCaller(p string) (int, *unix.Stat_t, error) {
	fd, err := openat2(unix.AT_FDCWD, p, unix.O_PATH, 0, unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return -1, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, &st, nil
}

// dirEnterable reports whether the calling thread's identity can make dir
// its working directory. Every failure looks the same (a missing directory,
// one behind a directory the user cannot search, a magic link it may not
// follow), so the answer tells the user nothing its own code could not find
// out.
func dirEnterable(dir string) bool {
	fd, st, err := statAsCaller(dir)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	return unix.Faccessat2(fd, "", unix.X_OK, unix.AT_EACCESS|unix.AT_EMPTY_PATH) == nil
}

// isExecutable reports whether p is, for the calling thread's identity, a
// file with an execute bit (what execvp looks for on the PATH).
func isExecutable(p string) bool {
	fd, st, err := statAsCaller(p)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Mode&0o111 != 0
}

// mkdirNoFollow creates name in parent (nothing when it exists) and opens
// it as a directory without following a symlink or crossing a mount.
// created says whether this call made it.
func mkdirNoFollow(parent int, name string, mode uint32) (fd int, created bool, err error) {
	err = unix.Mkdirat(parent, name, mode)
	created = err == nil
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, false, err
	}
	fd, err = openat2(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveOwn)
	return fd, created, err
}

// ensureWorkDir creates the sandbox's working directory, owned by the
// sandbox user, when the image lacks it (a recipe's workdir step or an OCI
// config may name a directory nothing created). It lands in the writable
// layer, never in the image. It runs during setup, while the agent still
// may chown, and walks descriptors: an image (or a snapshot) that has a
// symlink anywhere on the way is left alone rather than followed. Failing
// is logged, not fatal: commands then say what is missing.
func (s *server) ensureWorkDir() {
	cfg, log := s.cfg, s.log
	if cfg.WorkDir == "" || cfg.WorkDir == "/" || !strings.HasPrefix(cfg.WorkDir, "/") {
		return
	}
	parts := strings.Split(strings.Trim(path.Clean(cfg.WorkDir), "/"), "/")
	cur, err := unix.Dup(s.rootFD)
	if err != nil {
		log.Warn("create workdir", "dir", cfg.WorkDir, "err", err)
		return
	}
	created := false
	for _, part := range parts {
		if part == ".." {
			unix.Close(cur)
			log.Warn("create workdir: '..' in the path", "dir", cfg.WorkDir)
			return
		}
		next, made, err := mkdirNoFollow(cur, part, 0o755)
		unix.Close(cur)
		if err != nil {
			log.Warn("create workdir: not a plain directory on the root filesystem; left alone", "dir", cfg.WorkDir, "at", part, "err", err)
			return
		}
		cur, created = next, made
	}
	defer unix.Close(cur)
	if created && !cfg.Build {
		if err := unix.Fchown(cur, cfg.UID, cfg.GID); err != nil {
			log.Warn("chown workdir", "dir", cfg.WorkDir, "err", err)
		}
	}
}

// kernelLogName is the kernels' own log, in kernelRuntimeDir.
const kernelLogName = "kernels.log"

// prepareKernelDir makes kernelRuntimeDir a directory of the sandbox user,
// mode 0700, during setup (the agent cannot chown afterwards). Whatever
// stands in its place (a symlink, a file or a FIFO from the image or a
// snapshot) is removed first. Kernels write their connection files there
// with the user's identity.
func (s *server) prepareKernelDir() error {
	parent, name := path.Split(kernelRuntimeDir)
	pfd, _, err := mkdirNoFollow(s.rootFD, strings.Trim(parent, "/"), 0o755)
	if err != nil {
		return fmt.Errorf("%s: %w", parent, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err == nil && (st.Uid != 0 || st.Mode&0o022 != 0) {
		// The user could then swap the whole directory. The agent only
		// works in it as the user, and the kernel package's clean-up only
		// unlinks random names there, so this is no way in; say it anyway.
		s.log.Warn("the kernels' runtime directory's parent is writable by others than root", "dir", parent, "uid", st.Uid, "mode", fmt.Sprintf("%o", st.Mode&0o7777))
	}
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(pfd, name, 0); err != nil {
			return fmt.Errorf("remove the %s at %s: %w", kindOf(st.Mode), kernelRuntimeDir, err)
		}
	}
	fd, _, err := mkdirNoFollow(pfd, name, 0o700)
	if err != nil {
		return fmt.Errorf("%s: %w", kernelRuntimeDir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, s.cfg.UID, s.cfg.GID); err != nil {
		return fmt.Errorf("chown %s: %w", kernelRuntimeDir, err)
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return fmt.Errorf("chmod %s: %w", kernelRuntimeDir, err)
	}
	return nil
}

// openKernelLog opens the kernels' log for appending, as the user (the
// caller runs on a user thread): it becomes a kernel's stdout and stderr,
// so it must be a regular file of the user's, reached without a symlink.
// Anything else in its place (a symlink to the agent's memory, a FIFO, a
// hard link to someone else's file) is unlinked and a fresh log created.
func (s *server) openKernelLog() (*os.File, error) {
	dir := strings.TrimPrefix(kernelRuntimeDir, "/")
	flags := unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY
	var why error
	for attempt := 0; attempt < 2; attempt++ {
		fd, err := openat2(s.rootFD, dir+"/"+kernelLogName, flags, 0o600, resolveOwn)
		if err == nil {
			var st unix.Stat_t
			err = unix.Fstat(fd, &st)
			switch {
			case err != nil:
			case st.Mode&unix.S_IFMT != unix.S_IFREG:
				err = fmt.Errorf("a %s", kindOf(st.Mode))
			case int(st.Uid) != s.cfg.UID || st.Nlink != 1:
				err = fmt.Errorf("a file of uid %d with %d links", st.Uid, st.Nlink)
			}
			if err == nil {
				// O_NONBLOCK was for opening only; the kernel gets a
				// plain appending descriptor.
				if fl, ferr := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); ferr == nil {
					unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
				}
				return os.NewFile(uintptr(fd), kernelRuntimeDir+"/"+kernelLogName), nil
			}
			unix.Close(fd)
		}
		why = err
		dfd, derr := openat2(s.rootFD, dir, unix.O_PATH|unix.O_DIRECTORY, 0, resolveOwn)
		if derr != nil {
			return nil, derr
		}
		unix.Unlinkat(dfd, kernelLogName, 0)
		unix.Close(dfd)
		flags |= unix.O_EXCL
	}
	return nil, fmt.Errorf("%s/%s: %w", kernelRuntimeDir, kernelLogName, why)
}

// userOOMScoreAdj is the OOM score adjustment of what the agent starts: the
// kernel picks user code before the agent when the sandbox runs out of
// memory. The agent's own -1000 needs CAP_SYS_RESOURCE in the host's user
// namespace, which only the daemon has (and some hosts deny even it), so
// the agent may sit at 0; user processes at +500 still go first. Raising a
// score needs no privilege; user code may lower its own back to 0 at most,
// and then risks only its own sandbox.
const userOOMScoreAdj = "500"

// setOOMScoreAdj gives a started process userOOMScoreAdj (it inherits the
// agent's). /proc/<pid>/oom_score_adj belongs to the process's user, so the
// caller runs with that user's identity: the agent no longer overrides file
// permissions.
func setOOMScoreAdj(pid int, log *slog.Logger) {
	if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(userOOMScoreAdj), 0); err != nil && log != nil {
		log.Debug("reset oom_score_adj", "pid", pid, "err", err)
	}
}
