package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The writable layer of a sandbox lives on its own ext4 filesystem in a sparse
// file (disk.img) of disk_mb, loop-mounted at <dir>/disk. That is what makes
// disk_mb a hard limit: writing past it gives ENOSPC inside the sandbox, and
// nothing a sandbox writes can fill the host's disk.
//
// Formatting a filesystem costs ~25 ms, so one formatted, empty image per size
// is kept in the cache directory and copied sparsely (a few ms) for each new
// sandbox.

type diskCache struct {
	dir string
	mu  sync.Mutex
}

// template returns the path of a formatted empty ext4 image of sizeMB.
func (c *diskCache) template(sizeMB int64) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	path := filepath.Join(c.dir, fmt.Sprintf("ext4-%dm.img", sizeMB))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	if err := f.Truncate(sizeMB << 20); err != nil {
		f.Close()
		return "", err
	}
	f.Close()
	// No journal: the writable layer is scratch space whose durable form is a
	// snapshot. root_owner makes the fs root 0:0; the overlay upper and work
	// dirs are made by the runtime. lazy init keeps formatting fast.
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-O", "^has_journal",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0", "-m", "0", tmp).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("mkfs.ext4 (is e2fsprogs installed? run make setup): %v: %s", err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	return path, nil
}

// copySparse copies src to dst keeping holes, so a 1 GiB image with a few MB
// of metadata costs a few MB of I/O.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(st.Size()); err != nil {
		return err
	}
	fd := int(in.Fd())
	var off int64
	for off < st.Size() {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole remains
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(out, in, hole-data); err != nil {
			return fmt.Errorf("copy extent: %w", err)
		}
		off = hole
	}
	return nil
}

// attachLoop binds a free loop device to file with autoclear, so the device
// frees itself once the filesystem on it is unmounted. The returned file must
// be closed by the caller after the mount.
func attachLoop(file string) (*os.File, string, error) {
	img, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return nil, "", err
	}
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, "", fmt.Errorf("open loop-control: %w", err)
	}
	defer ctl.Close()
	for attempt := 0; attempt < 20; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, "", fmt.Errorf("get free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lf, err := os.OpenFile(dev, os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			// The node may appear a moment after LOOP_CTL_GET_FREE made it.
			time.Sleep(2 * time.Millisecond)
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], file)
		err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) {
			lf.Close() // another sandbox took it between GET_FREE and CONFIGURE
			continue
		}
		if err != nil {
			lf.Close()
			return nil, "", fmt.Errorf("configure %s: %w", dev, err)
		}
		return lf, dev, nil
	}
	return nil, "", errors.New("no free loop device after 20 attempts")
}

// mountDisk prepares <dir>/disk.img from the template and mounts it at
// <dir>/disk with upper/ and work/ made for the overlay.
func mountDisk(cache *diskCache, dir string, sizeMB int64) error {
	img := filepath.Join(dir, "disk.img")
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		tpl, err := cache.template(sizeMB)
		if err != nil {
			return err
		}
		if err := copySparse(tpl, img); err != nil {
			os.Remove(img)
			return fmt.Errorf("copy disk template: %w", err)
		}
	}
	mnt := filepath.Join(dir, "disk")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	lf, dev, err := attachLoop(img)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := unix.Mount(dev, mnt, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, ""); err != nil {
		return fmt.Errorf("mount %s: %w", dev, err)
	}
	for _, d := range []string{"upper", "work"} {
		if err := os.MkdirAll(filepath.Join(mnt, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// unmount unmounts path if it is a mount point; a missing path or one that is
// not mounted is fine. A busy mount is detached lazily as a last resort.
func unmount(path string) error {
	for i := 0; i < 50; i++ {
		err := unix.Unmount(path, 0)
		switch {
		case err == nil:
			continue // stacked mounts: unmount until nothing is left
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY):
			time.Sleep(10 * time.Millisecond)
		default:
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("detach %s: %w", path, err)
	}
	return nil
}
