package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// syncFS flushes the filesystem that holds path.
func syncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// swapIn moves the directory tmp to final. If final exists the two are
// exchanged in one step (readers see the old image or the new one, never
// neither) and tmp then holds the old image, for the caller to remove.
func swapIn(tmp, final string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) {
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_EXCHANGE)
	}
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	// The filesystem lacks renameat2 flags: move the old image aside first.
	old := tmp + "-old"
	if err := os.Rename(final, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// lock takes the store's lock: s.mu for this process's goroutines and an
// exclusive flock on <dir>/.lock for other daemons sharing the directory
// (tests share one image store). It is held for commits, registrations,
// removals and layer gc, never for a whole build.
func (s *Store) lock() (unlock func(), err error) {
	s.mu.Lock()
	f, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("image store lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		s.mu.Unlock()
		return nil, fmt.Errorf("image store lock: %w", err)
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
		s.mu.Unlock()
	}, nil
}
