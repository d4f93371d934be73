//go:build linux

package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// Overlayfs's on-disk format (see ExtractOptions.Whiteouts).
const (
	whiteoutPrefix = ".wh."
	// whiteoutMeta starts the names of AUFS's own bookkeeping entries,
	// which OCI layers may carry and which mean nothing to overlayfs.
	whiteoutMeta   = whiteoutPrefix + whiteoutPrefix
	whiteoutOpaque = whiteoutMeta + ".opq"
	opaqueXattr    = "trusted.overlay.opaque"
)

// resolveBeneath confines every path lookup of an extraction to its
// directory: no absolute symlinks, no ".." above the start, no /proc magic
// links, no crossing into other mounts.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// extractor is one ExtractTar run. Every file operation is relative to a
// directory fd opened beneath rootFd with openat2, and acts on the final
// component itself (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW, or calls that never
// follow): a symlink made by an earlier entry is followed only where it
// stays beneath the root, and never by the entry's own name.
type extractor struct {
	ctx    context.Context
	rootFd int
	opts   ExtractOptions
	// chown is false when ownership is neither kept nor can be forced to
	// 0:0 (an unprivileged caller extracting a build context); the files
	// are then the caller's.
	chown bool
	// dirTimes holds the times of directory entries, set once everything
	// inside them is written. order keeps the first-seen order.
	dirTimes map[string][2]unix.Timespec
	order    []string
}

func extractTar(ctx context.Context, tr *tar.Reader, dir string, opts ExtractOptions) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	rootFd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("extract: open %s: %w", dir, err)
	}
	defer unix.Close(rootFd)
	x := &extractor{
		ctx:      ctx,
		rootFd:   rootFd,
		opts:     opts,
		chown:    opts.KeepOwners || os.Geteuid() == 0,
		dirTimes: map[string][2]unix.Timespec{},
	}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		// ErrInsecurePath (GODEBUG=tarinsecurepath=0) comes with a usable
		// header: names are checked here anyway.
		if err != nil && !(errors.Is(err, tar.ErrInsecurePath) && hdr != nil) {
			return tarErr(err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := x.entry(hdr, tr); err != nil {
			return archiveErr(err)
		}
	}
	return archiveErr(x.setDirTimes())
}

// archiveErrnos are the errors of file system calls that only an archive's
// content causes: a name or link target too long, an extended attribute
// or a time the kernel refuses, too many links to one file.
var archiveErrnos = []unix.Errno{unix.ENAMETOOLONG, unix.EINVAL, unix.ERANGE, unix.E2BIG, unix.EMLINK}

// archiveErr makes an error of the archive's content invalid_argument, as
// a malformed archive is; any other error (a full disk, say) stays the
// host's.
func archiveErr(err error) error {
	if err == nil || errors.Is(err, errdefs.ErrInvalidArgument) {
		return err
	}
	for _, e := range archiveErrnos {
		if errors.Is(err, e) {
			return errdefs.InvalidArgument("%v", err)
		}
	}
	return err
}

// entry extracts one archive entry.
func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	if err := x.opts.Budget.Add(1, 0); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader: // pax global header (git archive writes one)
		return nil
	case tar.TypeChar, tar.TypeBlock:
		if !x.opts.KeepOwners {
			return nil // device nodes only come with image layers
		}
	}
	if isSparse(hdr) {
		return sparseErr(hdr)
	}
	name, err := cleanEntryName(hdr.Name)
	if err != nil {
		return err
	}
	if name == "" { // the archive's root: dir itself
		if hdr.Typeflag != tar.TypeDir {
			return errdefs.InvalidArgument("tar entry %q: the archive's root must be a directory", hdr.Name)
		}
		return x.dirMeta(x.rootFd, ".", name, hdr)
	}
	parent, base := path.Dir(name), path.Base(name)

	if x.opts.Whiteouts && strings.HasPrefix(name, whiteoutMeta) && name != whiteoutOpaque {
		// AUFS bookkeeping at the top (.wh..wh.plnk/, .wh..wh.aufs),
		// skipped as Docker does.
		return nil
	}
	if x.opts.Whiteouts && strings.HasPrefix(base, whiteoutPrefix) {
		return x.whiteout(hdr, parent, base)
	}

	if hdr.Typeflag == tar.TypeLink {
		target, err := cleanEntryName(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hardlink %q: %w", hdr.Name, err)
		}
		if target == name {
			return nil // a file linked to itself is already there
		}
		if target == "" {
			return errdefs.InvalidArgument("tar entry %q: hardlink to the archive's root", hdr.Name)
		}
	}

	pfd, err := x.openDir(name, parent, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	isDir, err := x.clear(pfd, base, hdr.Typeflag == tar.TypeDir)
	if err != nil {
		return fmt.Errorf("extract %s: %w", name, err)
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		if !isDir {
			if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
		}
		return x.dirMeta(pfd, base, name, hdr)
	case tar.TypeReg, tar.TypeGNUSparse:
		return x.regular(pfd, base, name, hdr, r)
	case tar.TypeSymlink:
		if hdr.Linkname == "" {
			return errdefs.InvalidArgument("tar entry %q: symlink with an empty target", hdr.Name)
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		return x.meta(pfd, base, name, hdr, false)
	case tar.TypeLink:
		return x.hardlink(pfd, base, name, hdr)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		mode := uint32(unix.S_IFIFO)
		switch hdr.Typeflag {
		case tar.TypeChar:
			mode = unix.S_IFCHR
		case tar.TypeBlock:
			mode = unix.S_IFBLK
		}
		dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
		if err := unix.Mknodat(pfd, base, mode|0o600, int(dev)); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		return x.meta(pfd, base, name, hdr, true)
	default:
		return errdefs.InvalidArgument("tar entry %q: unsupported type %q", hdr.Name, hdr.Typeflag)
	}
}

// regular writes a regular file's content and metadata.
func (x *extractor) regular(pfd int, base, name string, hdr *tar.Header, r io.Reader) error {
	// The header says how big the file is: one over the bound is refused
	// before a byte of it is written (its bytes are counted as read).
	if err := x.opts.Budget.fits(hdr.Size); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("extract %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if _, err := io.Copy(f, r); err != nil {
		return fmt.Errorf("extract %s: %w", name, tarErr(err))
	}
	// chown before chmod and xattrs: chown clears setuid bits and file
	// capabilities.
	if x.chown {
		uid, gid := x.owner(hdr)
		if err := f.Chown(uid, gid); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&0o7777)); err != nil {
		return fmt.Errorf("extract %s: chmod: %w", name, err)
	}
	if err := x.xattrs(fd, name, hdr); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("extract %s: %w", name, err)
	}
	return x.times(pfd, base, name, hdr)
}

// hardlink links name to the earlier entry hdr.Linkname.
func (x *extractor) hardlink(pfd int, base, name string, hdr *tar.Header) error {
	target, _ := cleanEntryName(hdr.Linkname) // checked by entry
	tfd, err := x.openDir(name, path.Dir(target), false)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	// Flags 0: a hardlink to a symlink links the symlink itself.
	err = unix.Linkat(tfd, path.Base(target), pfd, base, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return errdefs.InvalidArgument("tar entry %q: hardlink to %q, which the archive does not hold", hdr.Name, hdr.Linkname)
	case errors.Is(err, unix.EPERM):
		return errdefs.InvalidArgument("tar entry %q: cannot hardlink to %q (a directory?)", hdr.Name, hdr.Linkname)
	case err != nil:
		return fmt.Errorf("extract %s: %w", name, err)
	}
	return nil // the link shares its target's inode and metadata
}

// whiteout applies an OCI whiteout entry in overlayfs's format.
func (x *extractor) whiteout(hdr *tar.Header, parent, base string) error {
	switch {
	case base == whiteoutOpaque:
		fd, err := x.openDirFlags(hdr.Name, parent, true, unix.O_RDONLY)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Fsetxattr(fd, opaqueXattr, []byte("y"), 0); err != nil {
			return fmt.Errorf("extract %s: mark opaque: %w", hdr.Name, err)
		}
		return nil
	case strings.HasPrefix(base, whiteoutMeta):
		return nil // AUFS bookkeeping (.wh..wh.plnk, ...)
	}
	victim := strings.TrimPrefix(base, whiteoutPrefix)
	if victim == "" || victim == "." || victim == ".." {
		return errdefs.InvalidArgument("tar entry %q: bad whiteout", hdr.Name)
	}
	pfd, err := x.openDir(hdr.Name, parent, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if _, err := x.clear(pfd, victim, false); err != nil {
		return fmt.Errorf("extract %s: %w", hdr.Name, err)
	}
	if err := unix.Mknodat(pfd, victim, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("extract %s: whiteout: %w", hdr.Name, err)
	}
	return nil
}

// dirMeta applies a directory entry's owner, mode and xattrs now and
// records its times for the end.
func (x *extractor) dirMeta(pfd int, base, name string, hdr *tar.Header) error {
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("extract %s/: %w", name, err)
	}
	defer unix.Close(fd)
	if x.chown {
		uid, gid := x.owner(hdr)
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return fmt.Errorf("extract %s/: %w", name, err)
		}
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&0o7777)); err != nil {
		return fmt.Errorf("extract %s/: chmod: %w", name, err)
	}
	if err := x.xattrs(fd, name, hdr); err != nil {
		return err
	}
	if _, ok := x.dirTimes[name]; !ok {
		x.order = append(x.order, name)
	}
	x.dirTimes[name] = timespecs(hdr)
	return nil
}

// meta applies the owner, mode (unless a symlink: modes mean nothing
// there) and times of the non-directory base, which it never follows.
func (x *extractor) meta(pfd int, base, name string, hdr *tar.Header, chmod bool) error {
	if x.chown {
		uid, gid := x.owner(hdr)
		if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
	}
	if chmod {
		// fchmodat cannot refuse to follow, but base was just made by
		// mknod, so it is no symlink.
		if err := unix.Fchmodat(pfd, base, uint32(hdr.Mode&0o7777), 0); err != nil {
			return fmt.Errorf("extract %s: chmod: %w", name, err)
		}
	}
	return x.times(pfd, base, name, hdr)
}

// owner returns the uid and gid that hdr's file gets.
func (x *extractor) owner(hdr *tar.Header) (int, int) {
	if x.opts.KeepOwners {
		return hdr.Uid, hdr.Gid
	}
	return 0, 0
}

// xattrs sets hdr's PAX extended attributes that ExtractTar keeps on the
// open file fd (all of them for forkbox's own layer tars).
func (x *extractor) xattrs(fd int, name string, hdr *tar.Header) error {
	for k, v := range hdr.PAXRecords {
		attr, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || !(x.opts.layerFormat || strings.HasPrefix(attr, "user.") || attr == "security.capability") {
			continue
		}
		if err := unix.Fsetxattr(fd, attr, []byte(v), 0); err != nil {
			return fmt.Errorf("extract %s: set xattr %s: %w", name, attr, err)
		}
	}
	return nil
}

// times sets base's access and modification times without following it.
func (x *extractor) times(pfd int, base, name string, hdr *tar.Header) error {
	ts := timespecs(hdr)
	if err := unix.UtimesNanoAt(pfd, base, ts[:], unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("extract %s: set times: %w", name, err)
	}
	return nil
}

// setDirTimes gives the directories their archived times, now that nothing
// more is written inside them. A directory replaced since by another kind
// of file is left alone.
func (x *extractor) setDirTimes() error {
	for _, name := range x.order {
		ts := x.dirTimes[name]
		if name == "" {
			if err := unix.UtimesNanoAt(x.rootFd, ".", ts[:], 0); err != nil {
				return fmt.Errorf("extract: set times of the root: %w", err)
			}
			continue
		}
		pfd, err := x.openDir(name, path.Dir(name), false)
		if err != nil {
			continue // gone meanwhile, or behind a symlink that escapes
		}
		base := path.Base(name)
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = unix.UtimesNanoAt(pfd, base, ts[:], unix.AT_SYMLINK_NOFOLLOW)
			if err != nil {
				unix.Close(pfd)
				return fmt.Errorf("extract %s/: set times: %w", name, err)
			}
		}
		unix.Close(pfd)
	}
	return nil
}

// timespecs returns hdr's access and modification times (the access time
// defaults to the modification time).
func timespecs(hdr *tar.Header) [2]unix.Timespec {
	atime := hdr.AccessTime
	if atime.IsZero() {
		atime = hdr.ModTime
	}
	return [2]unix.Timespec{timespec(atime), timespec(hdr.ModTime)}
}

func timespec(t time.Time) unix.Timespec {
	if t.IsZero() {
		return unix.NsecToTimespec(0)
	}
	return unix.NsecToTimespec(t.UnixNano())
}

// clear makes room for a new entry named base in the directory pfd: it
// removes whatever is there, except a directory when keepDir (a directory
// entry over an existing directory merges into it). It reports whether a
// directory was kept.
func (x *extractor) clear(pfd int, base string, keepDir bool) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if keepDir && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return true, nil
	}
	return false, removeAt(pfd, base)
}

// removeAt removes name from the directory dirFd, recursively for a
// directory, never following symlinks.
func removeAt(dirFd int, name string) error {
	err := unix.Unlinkat(dirFd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	fd, err := unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	names, err := d.Readdirnames(-1)
	if err != nil {
		d.Close()
		return err
	}
	for _, n := range names {
		if err := removeAt(fd, n); err != nil {
			d.Close()
			return err
		}
	}
	d.Close()
	return unix.Unlinkat(dirFd, name, unix.AT_REMOVEDIR)
}

// openDir returns an O_PATH fd for the directory rel (relative to the
// root, "." for the root), resolved beneath the root. With create, missing
// directories are made 0755 and owned by root. entry names the archive entry
// for errors.
func (x *extractor) openDir(entry, rel string, create bool) (int, error) {
	return x.openDirFlags(entry, rel, create, unix.O_PATH)
}

func (x *extractor) openDirFlags(entry, rel string, create bool, flags int) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_DIRECTORY | unix.O_CLOEXEC), Resolve: resolveBeneath}
	fd, err := openat2(x.rootFd, rel, how)
	if err == nil || !create || !errors.Is(err, unix.ENOENT) {
		return fd, dirErr(entry, rel, err)
	}
	// Walk down, making what is missing. Each directory is made in its
	// parent's fd, and each lookup starts again from the root, beneath it.
	parts := strings.Split(rel, "/")
	pfd, err := unix.Dup(x.rootFd)
	if err != nil {
		return -1, err
	}
	for i, part := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		fd, err := openat2(x.rootFd, prefix, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveBeneath})
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(pfd, part, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(pfd)
				return -1, fmt.Errorf("extract %s: make %s: %w", entry, prefix, err)
			}
			if err := x.fixNewDir(pfd, part); err != nil {
				unix.Close(pfd)
				return -1, fmt.Errorf("extract %s: make %s: %w", entry, prefix, err)
			}
			fd, err = openat2(x.rootFd, prefix, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveBeneath})
		}
		unix.Close(pfd)
		if err != nil {
			return -1, dirErr(entry, prefix, err)
		}
		pfd = fd
	}
	unix.Close(pfd)
	// Reopen with the caller's flags.
	fd, err = openat2(x.rootFd, rel, how)
	return fd, dirErr(entry, rel, err)
}

// fixNewDir gives a directory ExtractTar made on its own mode 0755 and owner
// 0:0, whatever the umask and the parent's setgid bit.
func (x *extractor) fixNewDir(pfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil // not ours (a symlink, a file): the lookup will tell
	}
	if x.chown && (st.Uid != 0 || st.Gid != 0) {
		if err := unix.Fchownat(pfd, name, 0, 0, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	return unix.Fchmodat(pfd, name, 0o755, 0)
}

// openat2 is unix.Openat2, retrying when a concurrent rename made the
// kernel give up (EAGAIN) or a signal interrupted it.
func openat2(dirFd int, rel string, how *unix.OpenHow) (int, error) {
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirFd, rel, how)
		if (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR)) && i < 16 {
			continue
		}
		return fd, err
	}
}

// dirErr explains why the parent directory rel of entry cannot be used.
func dirErr(entry, rel string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return errdefs.InvalidArgument("tar entry %q: path %s leads outside the extraction directory through a symlink", entry, rel)
	case errors.Is(err, unix.ENOTDIR):
		return errdefs.InvalidArgument("tar entry %q: %s is not a directory", entry, rel)
	case errors.Is(err, unix.ENOENT):
		return errdefs.InvalidArgument("tar entry %q: directory %s does not exist", entry, rel)
	case errors.Is(err, unix.ENOSYS):
		return errdefs.Unavailable("extracting archives needs openat2 (Linux 5.6 or later)")
	default:
		return fmt.Errorf("extract %s: open %s: %w", entry, rel, err)
	}
}

// isOpaqueDir reports whether the layer directory dir is marked opaque.
func isOpaqueDir(dir string) bool {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(dir, opaqueXattr, buf)
	return err == nil && n == 1 && buf[0] == 'y'
}
