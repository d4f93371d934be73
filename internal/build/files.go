package build

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/forkbox/forkbox/internal/diskspace"
)

// lookupUser resolves a recipe's user (name, uid, name:group or uid:gid)
// through the image's /etc/passwd and /etc/group, read from the top-most
// lower dir that has them.
func lookupUser(lowers []string, spec string) (uid, gid int, err error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	uid, gid = -1, -1
	if n, err := strconv.Atoi(userPart); err == nil {
		uid = n
	} else {
		entry, err := findEntry(lowers, "etc/passwd", userPart)
		if err != nil {
			return 0, 0, err
		}
		if entry == nil {
			return 0, 0, fmt.Errorf("user %q is not in the image's /etc/passwd (create it in a run step first, or give a uid)", userPart)
		}
		if uid, err = strconv.Atoi(entry[2]); err != nil {
			return 0, 0, fmt.Errorf("bad /etc/passwd entry for %q", userPart)
		}
		if gid, err = strconv.Atoi(entry[3]); err != nil {
			return 0, 0, fmt.Errorf("bad /etc/passwd entry for %q", userPart)
		}
	}
	if hasGroup {
		if n, err := strconv.Atoi(groupPart); err == nil {
			gid = n
		} else {
			entry, err := findEntry(lowers, "etc/group", groupPart)
			if err != nil {
				return 0, 0, err
			}
			if entry == nil {
				return 0, 0, fmt.Errorf("group %q is not in the image's /etc/group", groupPart)
			}
			if gid, err = strconv.Atoi(entry[2]); err != nil {
				return 0, 0, fmt.Errorf("bad /etc/group entry for %q", groupPart)
			}
		}
	}
	if gid < 0 {
		gid = uid
	}
	if uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("invalid user %q", spec)
	}
	return uid, gid, nil
}

// findEntry returns the colon-separated fields of name's line in file (such
// as etc/passwd) of the top-most lower dir holding the file; nil when there
// is no such line. A whiteout (a character device) hides the file below.
func findEntry(lowers []string, file, name string) ([]string, error) {
	for _, dir := range lowers {
		p := filepath.Join(dir, file)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) >= 4 && fields[0] == name {
				return fields, nil
			}
		}
		return nil, sc.Err()
	}
	return nil, nil
}

// treeDigest digests a file or directory tree: names, modes, symlink
// targets and contents. It keys the cache of copy steps.
func treeDigest(root string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%o\x00", rel, info.Mode())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00", target)
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			fmt.Fprintf(h, "%d\x00", info.Size())
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read the build context: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// treeCount counts the entries of a file or directory tree and the bytes
// of its regular files, for the bound of copy steps.
func treeCount(root string) (files, size int64, err error) {
	err = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		files++
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			size += info.Size()
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("read the build context: %w", err)
	}
	return files, size, nil
}

// copyInto copies src (a file or a directory's contents) to the absolute
// image path dest inside the layer tree layerDir. A dest ending in "/" takes
// a file under its own name. Missing parent directories are created 0755,
// owned by root; what is copied keeps its modes (the build context's files
// are owned by root).
func copyInto(ctx context.Context, src, layerDir, dest, what string, need int64) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	target := filepath.Join(layerDir, filepath.Clean("/"+dest))
	if !fi.IsDir() && strings.HasSuffix(dest, "/") {
		target = filepath.Join(target, filepath.Base(src))
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	args := []string{"-a", "--", src, target}
	if fi.IsDir() {
		if err := os.MkdirAll(target, fi.Mode().Perm()); err != nil {
			return fmt.Errorf("copy: %w", err)
		}
		args = []string{"-a", "--", src + "/.", target + "/"}
	}
	if out, err := exec.CommandContext(ctx, "cp", args...).CombinedOutput(); err != nil {
		text := strings.TrimSpace(string(out))
		if diskspace.InOutput(text) {
			return diskspace.Full(layerDir, what, need, false, fmt.Errorf("copy: %v: %s", err, text))
		}
		return fmt.Errorf("copy: %v: %s", err, text)
	}
	return nil
}
