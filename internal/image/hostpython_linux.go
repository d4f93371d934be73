package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// buildHostPython builds the python image in a temporary directory of the
// store and swaps it into place. The caller holds s.mu and has checked the
// host.
func (s *Store) buildHostPython(ctx context.Context) (*Image, error) {
	tmp, err := os.MkdirTemp(s.dir, tmpPrefix+HostImage+"-")
	if err != nil {
		return nil, fmt.Errorf("build python image: %w", err)
	}
	// tmp ends up holding either a failed build or, after the swap, the
	// image it replaced: both go.
	defer os.RemoveAll(tmp)

	final := filepath.Join(s.dir, HostImage)
	img, err := buildHostPythonIn(ctx, tmp, final)
	if err != nil {
		return nil, fmt.Errorf("build python image: %w", err)
	}
	// Make the files durable before the image becomes visible: a crash
	// must not leave an image.json over empty files.
	if err := syncFS(tmp); err != nil {
		return nil, fmt.Errorf("build python image: %w", err)
	}
	if err := swapIn(tmp, final); err != nil {
		return nil, fmt.Errorf("install python image: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return nil, fmt.Errorf("install python image: %w", err)
	}
	img.fill(s)
	return img, nil
}

// buildHostPythonIn writes the image (rootfs, empty, image.json) into dir,
// with paths in its metadata pointing at final, where it will be installed.
func buildHostPythonIn(ctx context.Context, dir, final string) (*Image, error) {
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	// empty is a read-only directory bound over host paths that the image
	// hides.
	if err := mkdirMode(filepath.Join(dir, "empty"), 0o755, 0, 0); err != nil {
		return nil, err
	}
	rootfs := filepath.Join(dir, "rootfs")
	binds, err := buildHostSkeleton(rootfs, filepath.Join(final, "empty"))
	if err != nil {
		return nil, err
	}
	if err := copyEtc(ctx, "/etc", filepath.Join(rootfs, "etc")); err != nil {
		return nil, err
	}
	size, err := treeSize(rootfs)
	if err != nil {
		return nil, err
	}
	img := &Image{
		Name:      HostImage,
		RootFS:    filepath.Join(final, "rootfs"),
		Binds:     binds,
		Env:       append([]string(nil), hostPythonEnv...),
		WorkDir:   workDir,
		UID:       userUID,
		GID:       userGID,
		CreatedAt: time.Now().UTC(),
		SizeBytes: size,
		Recipe:    hostPythonRecipe,
		Base:      "host",
	}
	img.ID = imageID(img)
	if err := writeMeta(dir, img); err != nil {
		return nil, err
	}
	return img, nil
}

// buildHostSkeleton creates the python image's root directory without /etc
// contents and returns the binds that complete it at sandbox start: the
// host's /usr, plus the top-level directories that a host without merged
// /usr keeps outside it, and emptyDir over /usr/local so that what the host
// installed by hand (its own binaries, Python packages and .pth hooks) does
// not show up in sandboxes.
func buildHostSkeleton(rootfs, emptyDir string) ([]Bind, error) {
	if err := mkdirMode(rootfs, 0o755, 0, 0); err != nil {
		return nil, err
	}
	var binds []Bind
	// bin -> usr/bin and friends, as on the host.
	for _, name := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		host := "/" + name
		fi, err := os.Lstat(host)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, err
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(host)
			if err != nil {
				return nil, err
			}
			if err := os.Symlink(target, filepath.Join(rootfs, name)); err != nil {
				return nil, err
			}
		case fi.IsDir():
			if err := mkdirMode(filepath.Join(rootfs, name), 0o755, 0, 0); err != nil {
				return nil, err
			}
			binds = append(binds, Bind{Source: host, Target: host, ReadOnly: true})
		}
	}
	binds = append(binds, Bind{Source: "/usr", Target: "/usr", ReadOnly: true})
	if fi, err := os.Stat("/usr/local"); err == nil && fi.IsDir() {
		binds = append(binds, Bind{Source: emptyDir, Target: "/usr/local", ReadOnly: true})
	}

	for _, d := range []struct {
		path     string
		mode     fs.FileMode
		uid, gid int
	}{
		{"usr", 0o755, 0, 0}, // the host's /usr is bound over it
		{"etc", 0o755, 0, 0},
		{"proc", 0o755, 0, 0},
		{"sys", 0o755, 0, 0},
		{"dev", 0o755, 0, 0},
		{"run", 0o755, 0, 0},
		{".forkbox", 0o755, 0, 0}, // the runtime's mount point for its agent
		{"tmp", 0o777 | fs.ModeSticky, 0, 0},
		{"var", 0o755, 0, 0},
		{"var/tmp", 0o777 | fs.ModeSticky, 0, 0},
		{"root", 0o700, 0, 0},
		{"home", 0o755, 0, 0},
		{"home/user", 0o755, userUID, userGID},
		{"workspace", 0o755, userUID, userGID},
	} {
		if err := mkdirMode(filepath.Join(rootfs, d.path), d.mode, d.uid, d.gid); err != nil {
			return nil, err
		}
	}
	// The user's site-packages exists from the start, so that Python (and a
	// kernel already running) puts it on sys.path: a `pip install --user`
	// is then importable without restarting anything.
	if out, err := exec.Command("/usr/bin/python3", "-I", "-c", "import sys; print('lib/python%d.%d/site-packages' % sys.version_info[:2])").Output(); err == nil {
		dir := "home/user/.local"
		if err := mkdirMode(filepath.Join(rootfs, dir), 0o755, userUID, userGID); err != nil {
			return nil, err
		}
		for _, part := range strings.Split(strings.TrimSpace(string(out)), "/") {
			dir = filepath.Join(dir, part)
			if err := mkdirMode(filepath.Join(rootfs, dir), 0o755, userUID, userGID); err != nil {
				return nil, err
			}
		}
	}
	return binds, nil
}

// copyEtc fills dstEtc from the allowlisted entries of hostEtc and writes the
// generated files. Copies are owned by root and readable by everyone (host
// modes, plus read, minus group/other write).
func copyEtc(ctx context.Context, hostEtc, dstEtc string) error {
	seen := map[string]bool{}
	for _, pattern := range etcAllow {
		matches, err := filepath.Glob(filepath.Join(hostEtc, pattern))
		if err != nil {
			return err
		}
		for _, src := range matches {
			rel, err := filepath.Rel(hostEtc, src)
			if err != nil {
				return err
			}
			if seen[rel] {
				continue
			}
			seen[rel] = true
			if err := mkdirParents(dstEtc, filepath.Dir(rel)); err != nil {
				return err
			}
			if err := copyTree(ctx, src, filepath.Join(dstEtc, rel), rel); err != nil {
				return err
			}
		}
	}
	files := map[string]string{"passwd": etcPasswd, "group": etcGroup, "hosts": etcHosts}
	// The host's resolver configuration, by content: on many hosts
	// /etc/resolv.conf is a symlink into /run, which a sandbox does not share.
	if data, err := os.ReadFile(filepath.Join(hostEtc, "resolv.conf")); err == nil {
		files["resolv.conf"] = string(data)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for name, content := range files {
		if err := writeFileMode(filepath.Join(dstEtc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies src to dst without following symlinks, skipping denied
// paths (rel is src relative to /etc) and anything but files, directories
// and symlinks.
func copyTree(ctx context.Context, src, dst, rel string) error {
	if etcDeny[rel] {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if err := mkdirMode(dst, (fi.Mode().Perm()|0o555)&^0o022, 0, 0); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			n := e.Name()
			if err := copyTree(ctx, filepath.Join(src, n), filepath.Join(dst, n), filepath.Join(rel, n)); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		return copyFile(src, dst, (fi.Mode().Perm()|0o444)&^0o022)
	default:
		return nil
	}
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func writeFileMode(path string, data []byte, mode fs.FileMode) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// mkdirMode creates one directory with exactly mode and owner, whatever the
// umask.
func mkdirMode(path string, mode fs.FileMode, uid, gid int) error {
	if err := os.Mkdir(path, 0o700); err != nil {
		return err
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// mkdirParents creates rel's components under base (0755, root) where missing.
func mkdirParents(base, rel string) error {
	if rel == "." {
		return nil
	}
	p := base
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		if err := mkdirMode(p, 0o755, 0, 0); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}
