package diskspace

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Of measures the filesystem holding path (or, when path is not there yet,
// its nearest ancestor that is).
func Of(path string) (Room, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Room{}, err
	}
	r := Room{Path: abs}
	p := abs
	var st unix.Statfs_t
	for {
		err = unix.Statfs(p, &st)
		if err == nil || !errors.Is(err, unix.ENOENT) || p == "/" {
			break
		}
		p = filepath.Dir(p)
	}
	if err != nil {
		return r, &os.PathError{Op: "statfs", Path: p, Err: err}
	}
	r.Free = int64(st.Bavail) * st.Bsize
	r.Total = int64(st.Blocks) * st.Bsize
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	var s unix.Stat_t
	if unix.Stat(p, &s) == nil {
		if f, err := os.Open("/proc/self/mountinfo"); err == nil {
			defer f.Close()
			r.Mount, r.FSType, r.Device = mountOf(bufio.NewScanner(f), p, unix.Major(s.Dev), unix.Minor(s.Dev))
		}
	}
	return r, nil
}

// mountOf finds, in mountinfo's lines, the mount that holds path (a clean
// absolute path without symlinks) on device major:minor: the longest mount
// point that is path or one of its ancestors, of that device when one is
// (a filesystem whose files report another device, like btrfs's
// subvolumes, takes the longest mount point alone).
func mountOf(sc *bufio.Scanner, path string, major, minor uint32) (mount, fstype, device string) {
	dev := strconv.FormatUint(uint64(major), 10) + ":" + strconv.FormatUint(uint64(minor), 10)
	best, bestDev := -1, false
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 {
			continue
		}
		mp := unescape(f[4])
		if !within(path, mp) {
			continue
		}
		sameDev := f[2] == dev
		if (sameDev && !bestDev) || (sameDev == bestDev && len(mp) >= best) {
			best, bestDev = len(mp), sameDev
			mount, fstype, device = mp, g[0], unescape(g[1])
		}
	}
	return mount, fstype, device
}

// within says whether path is dir or lies under it.
func within(path, dir string) bool {
	return dir == "/" || path == dir || strings.HasPrefix(path, dir+"/")
}

// unescape undoes mountinfo's octal escapes (\040 for a space, …).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
