package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"

	"github.com/forkbox/forkbox/internal/userns"
	"golang.org/x/sys/unix"
)

// User namespaces: every sandbox's processes run in a user namespace whose
// ids 0..65535 are host ids base..base+65535 (package userns hands out the
// ranges). The image's layers hold canonical ids (root is 0, the user
// 1000): each sandbox mounts them through idmapped mounts made with its own
// mapping, so inside they show as 0 and 1000 while the kernel sees base and
// base+1000. The writable layer stores host ids on its own ext4 (an overlay
// upper layer cannot be idmapped), which is why a lineage keeps its range.

// usernsHolder is a sleeping process in a fresh user namespace with a
// sandbox's mapping. Idmapped mounts take the mapping of a user namespace
// (copied at mount time), so a restore, whose user namespace CRIU makes
// later, idmaps its layers with a holder's. The spawner starts it (a child
// in a new user namespace forked from the daemon would copy the daemon's
// address space; see spawn_linux.go).
type usernsHolder struct {
	proc *os.Process
	ns   *os.File
}

func (r *Runtime) newUsernsHolder(base uint32) (*usernsHolder, error) {
	proc, err := r.spawner.spawnUserns(base)
	if err != nil {
		return nil, fmt.Errorf("user namespace for id range %d: %w", base, err)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", proc.Pid))
	if err != nil {
		proc.Kill()
		proc.Wait()
		return nil, err
	}
	return &usernsHolder{proc: proc, ns: ns}, nil
}

func (h *usernsHolder) close() {
	h.ns.Close()
	h.proc.Kill()
	h.proc.Wait()
}

// idmapClone attaches at dst (an existing empty dir or file) a clone of the
// mount tree at src, idmapped with the mapping of the user namespace usernsFd
// refers to, read-only unless rw.
func idmapClone(src, dst string, usernsFd int, rw bool) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("clone mount of %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(usernsFd)}
	if !rw {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("idmap %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach idmapped %s at %s: %w", src, dst, err)
	}
	return nil
}

// inDir runs fn on a thread of its own whose working directory is dir, so
// that fn can name paths relative to dir without touching the process's
// working directory (the thread unshares its filesystem context and is
// thrown away afterwards). Mounting an overlay with relative layer paths
// keeps the host's paths out of the options every sandbox can read in
// /proc/self/mountinfo.
func inDir(dir string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("unshare fs: %w", err)
			return
		}
		if err := unix.Chdir(dir); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// shiftOwners adds delta to the owner and group of every file under root
// (not following symlinks): a writable layer whose host ids belong to one
// range moved to another, or a build's layer returned to canonical ids.
// Ids outside the range's 65536 are left alone.
func shiftOwners(root string, from, to uint32) error {
	if from == to {
		return nil
	}
	shift := func(id uint32) (uint32, bool) {
		if id < from || id >= from+userns.Size {
			return id, false
		}
		return id - from + to, true
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		uid, okU := shift(st.Uid)
		gid, okG := shift(st.Gid)
		if !okU && !okG {
			return nil
		}
		if err := unix.Lchown(p, int(uid), int(gid)); err != nil {
			return fmt.Errorf("shift owner of %s: %w", p, err)
		}
		// chown clears set-id bits; put them back (not on symlinks).
		if d.Type()&fs.ModeSymlink == 0 && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			if err := unix.Chmod(p, st.Mode&07777); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeInRoot writes a file at rel beneath the sandbox root rootfs without
// following any symlink an image (or a restored writable layer) may have
// put there: a symlink at the name is replaced, one on the way is refused.
// The file ends up owned by uid:gid (host ids) with mode.
func writeInRoot(rootfs, rel string, data []byte, mode uint32, uid, gid int) error {
	root, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	how := &unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_TRUNC | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	fd, err := unix.Openat2(root, rel, how)
	if errors.Is(err, unix.ELOOP) {
		// A symlink (or something else unopenable) at the name itself:
		// remove it from its directory, then create the file.
		dirFd, derr := unix.Openat2(root, filepath.Dir(rel), &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		})
		if derr != nil {
			return fmt.Errorf("%s: %w", rel, derr)
		}
		uerr := unix.Unlinkat(dirFd, filepath.Base(rel), 0)
		unix.Close(dirFd)
		if uerr != nil {
			return fmt.Errorf("%s: %w", rel, uerr)
		}
		fd, err = unix.Openat2(root, rel, how)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is not a regular file", rel)
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	return unix.Fchmod(fd, mode)
}

// mountAttach is a mount of the host (src) to attach at dst in a sandbox's
// mount namespace.
type mountAttach struct{ src, dst string }

// attachMounts attaches clones of host mounts in the mount namespace of pid
// (a sandbox's init that has not built its root yet), from a thread of the
// daemon that enters that namespace and is thrown away afterwards. Unlike
// mount propagation, nothing of the host's stays tied to the sandbox's
// namespace: the host unmounts its own mounts freely.
func attachMounts(pid int, list []mountAttach) error {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, m := range list {
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("clone mount %s: %w", m.src, err)
		}
		fds = append(fds, fd)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return err
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("unshare fs: %w", err)
			return
		}
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("enter the sandbox's mount namespace: %w", err)
			return
		}
		for i, m := range list {
			if err := unix.MoveMount(fds[i], "", unix.AT_FDCWD, m.dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				errc <- fmt.Errorf("attach %s in the sandbox at %s: %w", m.src, m.dst, err)
				return
			}
		}
		errc <- nil
	}()
	return <-errc
}
