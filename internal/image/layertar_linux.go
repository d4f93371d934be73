//go:build linux

package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// Layer tars are forkbox's own format for moving a layer's tree between
// nodes (remote.go): a PAX tar of <layer>/fs exactly as overlayfs reads it —
// numeric owners, modes with setuid/setgid/sticky bits, nanosecond
// modification times, symlinks, hardlinks, fifos, device nodes (whiteouts
// are 0:0 character devices) and every extended attribute, trusted.overlay.*
// (opaque directories, redirects) included. Unlike ExtractTar on a user's
// archive, which must drop trusted.* so that no archive forges overlayfs's
// metadata, extractLayerTar keeps them: it only reads tars that this code
// wrote and whose sha256 the image's record in the bucket vouches for.

// writeLayerTar writes the tree under dir to w as a layer tar. Entries come
// in lexical order, parents first, so equal trees give equal tars.
func writeLayerTar(ctx context.Context, dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{} // (dev, inode) → first name, for hardlinks
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("layer tar: %s: %w", p, err)
		}
		hdr := &tar.Header{
			Name:    name,
			Mode:    int64(st.Mode & 0o7777),
			Uid:     int(st.Uid),
			Gid:     int(st.Gid),
			ModTime: time.Unix(st.Mtim.Unix()),
			Format:  tar.FormatPAX,
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag = tar.TypeDir
			if name == "." {
				hdr.Name = "./"
			} else {
				hdr.Name += "/"
			}
		case unix.S_IFREG:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = st.Size
		case unix.S_IFLNK:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return fmt.Errorf("layer tar: %w", err)
			}
		case unix.S_IFCHR, unix.S_IFBLK:
			hdr.Typeflag = tar.TypeChar
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				hdr.Typeflag = tar.TypeBlock
			}
			hdr.Devmajor = int64(unix.Major(st.Rdev))
			hdr.Devminor = int64(unix.Minor(st.Rdev))
		case unix.S_IFIFO:
			hdr.Typeflag = tar.TypeFifo
		case unix.S_IFSOCK:
			return nil // a socket a build step left behind: nothing to carry, as tar does
		default:
			return fmt.Errorf("layer tar: %s: unsupported file type %#o", p, st.Mode&unix.S_IFMT)
		}
		if hdr.Typeflag != tar.TypeDir && st.Nlink > 1 {
			key := [2]uint64{st.Dev, st.Ino}
			if first, ok := links[key]; ok {
				// A hardlink shares its first name's inode, metadata
				// and xattrs.
				return tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: first, Format: tar.FormatPAX})
			}
			links[key] = name
		}
		if err := addXattrs(hdr, p); err != nil {
			return err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("layer tar: %s: %w", name, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("layer tar: %w", err)
		}
		defer f.Close()
		if n, err := io.Copy(tw, f); err != nil || n != hdr.Size {
			if err == nil {
				err = errors.New("file changed size while being read")
			}
			return fmt.Errorf("layer tar: %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// addXattrs puts every extended attribute of the file p (not followed) in
// hdr's PAX records.
func addXattrs(hdr *tar.Header, p string) error {
	names, err := listXattrs(p)
	if err != nil {
		return fmt.Errorf("layer tar: list xattrs of %s: %w", p, err)
	}
	sort.Strings(names)
	for _, n := range names {
		v, err := getXattr(p, n)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return fmt.Errorf("layer tar: xattr %s of %s: %w", n, p, err)
		}
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords["SCHILY.xattr."+n] = string(v)
	}
	return nil
}

func listXattrs(p string) ([]string, error) {
	size, err := unix.Llistxattr(p, nil)
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	for err == nil && size > 0 {
		buf := make([]byte, size)
		var n int
		n, err = unix.Llistxattr(p, buf)
		if errors.Is(err, unix.ERANGE) {
			size, err = unix.Llistxattr(p, nil)
			continue
		}
		if err != nil {
			break
		}
		var out []string
		for start, i := 0, 0; i < n; i++ {
			if buf[i] == 0 {
				if i > start {
					out = append(out, string(buf[start:i]))
				}
				start = i + 1
			}
		}
		return out, nil
	}
	return nil, err
}

func getXattr(p, name string) ([]byte, error) {
	for {
		size, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size)
		n, err := unix.Lgetxattr(p, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// extractLayerTar unpacks a layer tar written by writeLayerTar into dir,
// keeping owners, device nodes and every extended attribute (see above).
// It stops at the archive's end, leaving the rest of r unread.
func extractLayerTar(ctx context.Context, r io.Reader, dir string) error {
	return extractTar(ctx, tar.NewReader(ctxReader{ctx: ctx, r: r}), dir,
		ExtractOptions{KeepOwners: true, layerFormat: true})
}
