package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/units"
)

// ExtractOptions says how ExtractTar turns archive entries into files.
type ExtractOptions struct {
	// Whiteouts converts OCI whiteouts into overlayfs's own format, for
	// image layers: an entry ".wh.NAME" becomes a 0:0 character device
	// NAME, and ".wh..wh..opq" marks its directory opaque with the xattr
	// trusted.overlay.opaque=y. Without it such entries are plain files.
	Whiteouts bool
	// KeepOwners keeps the archive's uids and gids and creates its device
	// nodes, as an image layer needs. Without it every entry is owned by
	// 0:0 and device nodes are skipped, as a build context needs.
	KeepOwners bool
	// Budget, when not nil, bounds what the extraction writes: the bytes
	// of the uncompressed tar stream and the number of entries. An entry
	// that would go over is refused before any of it is written; the
	// error (errdefs.ErrTooLarge) names the bound.
	Budget *Budget

	// layerFormat extracts forkbox's own layer tars (layertar_linux.go): every
	// extended attribute is kept, trusted.overlay.* included. Unexported
	// on purpose: user archives never get it.
	layerFormat bool
}

// ExtractTar unpacks the tar stream r into the existing or new directory dir,
// which should be empty or hold an earlier extraction; a stream that starts
// with the gzip magic is decompressed first.
//
// It handles regular files, directories, symlinks, hardlinks, fifos and
// (with KeepOwners) device nodes, with their modes (setuid, setgid and
// sticky bits included), owners, modification times and the extended
// attributes user.* and security.capability (any other, trusted.* above all,
// is dropped: an archive must not forge overlayfs's metadata). A later entry
// replaces an earlier one of the same path, as tar does; directories missing
// from the archive are created 0755 and owned by root.
//
// Nothing is ever written outside dir: a name that is absolute or climbs
// out with ".." is refused, and paths are resolved beneath dir without ever
// leaving it, so an archive holding "a -> /etc" and then "a/passwd" fails
// instead of touching the host's /etc. A malformed archive gives an error
// wrapping errdefs.ErrInvalidArgument.
func ExtractTar(ctx context.Context, r io.Reader, dir string, opts ExtractOptions) error {
	tr, err := openTarStream(ctxReader{ctx: ctx, r: r}, opts.Budget)
	if err != nil {
		return err
	}
	return extractTar(ctx, tr, dir, opts)
}

// openTarStream returns a tar reader over r, gunzipping r when it starts
// with the gzip magic; budget (if not nil) counts the uncompressed stream.
func openTarStream(r io.Reader, budget *Budget) (*tar.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(2)
	if err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, tarErr(err)
		}
		return tar.NewReader(budget.Reader(zr)), nil
	}
	return tar.NewReader(budget.Reader(br)), nil
}

// tarErr classifies an error met while reading an archive: a malformed
// archive (bad header, truncated, corrupt compression) is the caller's
// fault and wraps errdefs.ErrInvalidArgument; anything else (a cancelled
// context, a failing source) is wrapped as it is.
func tarErr(err error) error {
	if errors.Is(err, errdefs.ErrTooLarge) {
		return err // a bound, which names itself
	}
	var corrupt flate.CorruptInputError
	if errors.Is(err, tar.ErrHeader) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.As(err, &corrupt) {
		return errdefs.InvalidArgument("malformed tar archive: %v", err)
	}
	return fmt.Errorf("read tar archive: %w", err)
}

// ctxReader stops reading once ctx is done, so that a long extraction or
// spool ends soon after its caller gives up.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// cleanEntryName returns an archive entry's name as a clean relative
// slash-separated path ("" for the archive's root), refusing names that are
// absolute or climb out of the archive.
func cleanEntryName(name string) (string, error) {
	if name == "" {
		return "", errdefs.InvalidArgument("tar entry with an empty name")
	}
	if strings.ContainsRune(name, 0) {
		return "", errdefs.InvalidArgument("tar entry %q: name holds a NUL byte", name)
	}
	clean := path.Clean(name)
	if path.IsAbs(clean) {
		return "", errdefs.InvalidArgument("tar entry %q: absolute paths are not allowed", name)
	}
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", errdefs.InvalidArgument("tar entry %q: path leaves the archive's root", name)
	}
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

// isSparse reports whether hdr is a GNU sparse file (old GNU format, or
// PAX records GNU.sparse.*). Its holes read as zeros that the archive does
// not hold, so a few kilobytes of archive can stand for terabytes of file.
func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

func sparseErr(hdr *tar.Header) error {
	return errdefs.InvalidArgument("tar entry %q: sparse files are not supported", hdr.Name)
}

// Formats of image archives that Import reads.
const (
	// formatDocker is a `docker save` tarball: manifest.json at the top.
	formatDocker = "docker"
	// formatOCI is an OCI image layout (oci-layout, index.json, blobs/)
	// packed as a tar, as `skopeo copy ... oci-archive:` writes it.
	formatOCI = "oci"
)

// ociDefaultPath is the PATH of an image whose config names none: the one
// Docker gives such containers.
const ociDefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Import makes image name out of archive: a `docker save` tarball
// (manifest.json at its top) or an OCI image layout packed as a tar
// (oci-layout and index.json, as `skopeo copy ... oci-archive:` writes),
// plain or gzipped. Docker 25 and later write both at once; manifest.json is
// then read. An OCI index holding several images yields the one for linux on
// this machine's architecture; the image's Recipe is "oci/" and its manifest
// digest (for a docker save archive, which holds no registry manifest, its
// config digest: docker's image id).
//
// Each layer becomes a store layer (ChainID of its parent and
// "oci:"+diff id), extracted in overlayfs's format; layers the store already
// holds are reused. A layer whose content does not match its diff id is
// refused, so that an archive can never plant content under another layer's
// id. The image takes its environment, working directory and user from the
// image config; see importImage for the user.
//
// replace is passed to Register (it may refuse to replace an existing image
// of that name); logf, when not nil, receives a progress line per layer.
// Bad input (not a tar, neither format, corrupt JSON, missing blobs, layer
// content that does not match) gives an error wrapping
// errdefs.ErrInvalidArgument. An archive beyond the store's Bounds (once
// decompressed, its layers' streams together, their entries together)
// gives errdefs.ErrTooLarge naming the bound; a failed import leaves no
// file behind, and none of the layers it committed.
func (s *Store) Import(ctx context.Context, name string, archive io.Reader, replace func(old *Image) error, logf func(format string, args ...any)) (*Image, error) {
	if !validName.MatchString(name) {
		return nil, nameError(name)
	}
	// Spool the stream: neither format can be read in one pass (a docker
	// save tarball's manifest.json comes last).
	f, err := os.CreateTemp(s.dir, tmpPrefix+"import-")
	if err != nil {
		return nil, fmt.Errorf("import image %q: %w", name, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	// The spool holds the archive decompressed, and is bounded: a gzip bomb
	// stops at the bound, not at a full disk. (The archive as sent is the
	// caller's to bound, before any decompression of its own: the API
	// bounds the upload, ImportPath the file.)
	bounds := s.Bounds()
	br := bufio.NewReaderSize(ctxReader{ctx: ctx, r: archive}, 64<<10)
	var src io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, errdefs.InvalidArgument("image archive: %v", err)
		}
		src = zr
	}
	size, err := io.Copy(f, io.LimitReader(src, bounds.ExpandedBytes+1))
	if err != nil {
		if errors.Is(err, errdefs.ErrTooLarge) {
			return nil, err
		}
		if diskspace.IsFull(err) {
			return nil, diskspace.Full(s.dir, fmt.Sprintf("the archive of image %q (spooled before its import)", name), size, true, err)
		}
		return nil, fmt.Errorf("import image %q: spool archive: %w", name, tarErr(err))
	}
	if size > bounds.ExpandedBytes {
		return nil, ExpandedTooLarge("image archive", bounds.ExpandedBytes)
	}
	return s.importTar(ctx, name, f, size, replace, logf)
}

// ImportPath imports the image archive at path (see Import) as image name.
// path is a tar file (plain or gzipped, in either format) or a directory
// holding an OCI image layout.
func (s *Store) ImportPath(ctx context.Context, name, path string, replace func(old *Image) error, logf func(format string, args ...any)) (*Image, error) {
	if !validName.MatchString(name) {
		return nil, nameError(name)
	}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errdefs.NotFound("image archive %s not found", path)
	}
	if err != nil {
		return nil, fmt.Errorf("import image %q: %w", name, err)
	}
	if fi.IsDir() {
		if _, err := os.Stat(filepath.Join(path, "index.json")); err != nil {
			return nil, errdefs.InvalidArgument("%s is not an OCI image layout: no index.json", path)
		}
		return s.importLayout(ctx, name, path, replace, logf)
	}
	if limit := s.Bounds().ArchiveBytes; fi.Size() > limit {
		return nil, ArchiveTooLarge("image archive", limit)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("import image %q: %w", name, err)
	}
	defer f.Close()
	var magic [2]byte
	if _, err := io.ReadFull(f, magic[:]); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, fmt.Errorf("import image %q: %w", name, err)
		}
		return s.Import(ctx, name, f, replace, logf) // spools it decompressed
	}
	return s.importTar(ctx, name, f, fi.Size(), replace, logf)
}

// nameError returns the error Register gives for an invalid image name
// (same kind, same words), so that a bad name is refused before an archive
// is read.
func nameError(name string) error {
	return errdefs.InvalidArgument("invalid image name %q: use lowercase letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit)", name)
}

// importTar imports the uncompressed image archive f of size bytes.
func (s *Store) importTar(ctx context.Context, name string, f *os.File, size int64, replace func(old *Image) error, logf func(format string, args ...any)) (*Image, error) {
	format, err := archiveFormat(io.NewSectionReader(f, 0, size))
	if err != nil {
		return nil, err
	}
	// Up front: the layers take about what the archive holds (a docker
	// archive's are uncompressed; an OCI layout's compressed, and the
	// layout is unpacked first, so twice that at least).
	need := size
	if format == formatOCI {
		need = 2 * size
	}
	if err := diskspace.Check(s.dir, fmt.Sprintf("the layers of image %q", name), need); err != nil {
		return nil, err
	}
	if format == formatOCI {
		dir, err := os.MkdirTemp(s.dir, tmpPrefix+"import-")
		if err != nil {
			return nil, fmt.Errorf("import image %q: %w", name, err)
		}
		defer os.RemoveAll(dir)
		if err := extractLayoutTar(ctx, io.NewSectionReader(f, 0, size), dir, s.Bounds().Files); err != nil {
			return nil, diskspace.Map(err, s.dir, fmt.Sprintf("the OCI layout of image %q (unpacked before its import)", name), size)
		}
		return s.importLayout(ctx, name, dir, replace, logf)
	}

	// The docker format is read in place: go-containerregistry reopens the
	// archive for each file it wants.
	opener := func() (io.ReadCloser, error) {
		return io.NopCloser(io.NewSectionReader(f, 0, size)), nil
	}
	manifest, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, errdefs.InvalidArgument("docker archive: bad manifest.json: %v", err)
	}
	if len(manifest) != 1 {
		var tags []string
		for _, d := range manifest {
			tags = append(tags, d.RepoTags...)
		}
		return nil, errdefs.InvalidArgument("docker archive holds %d images (%s); save exactly one", len(manifest), strings.Join(tags, ", "))
	}
	img, err := tarball.Image(opener, nil)
	if err != nil {
		return nil, errdefs.InvalidArgument("docker archive: %v", err)
	}
	// A docker save archive holds no registry manifest, and making one up
	// would mean compressing every layer: the config digest (docker's image
	// id) names the content instead.
	cfgName, err := img.ConfigName()
	if err != nil {
		return nil, errdefs.InvalidArgument("docker archive: %v", err)
	}
	return s.importImage(ctx, name, img, cfgName, "", replace, logf)
}

// archiveFormat tells which image archive r is, reading its tar headers.
func archiveFormat(r io.Reader) (string, error) {
	tr := tar.NewReader(r)
	seen := map[string]bool{}
	n := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !(errors.Is(err, tar.ErrInsecurePath) && hdr != nil) {
			return "", errdefs.InvalidArgument("image archive is not a tar archive: %v", err)
		}
		n++
		if isSparse(hdr) {
			return "", sparseErr(hdr)
		}
		if name, err := cleanEntryName(hdr.Name); err == nil {
			seen[name] = true
		}
	}
	switch {
	case seen["manifest.json"]:
		// Docker 25 and later write an OCI layout as well; the docker
		// format is read in place, with no copy of the blobs.
		return formatDocker, nil
	case seen["oci-layout"] && seen["index.json"]:
		return formatOCI, nil
	case n == 0:
		return "", errdefs.InvalidArgument("image archive is empty")
	default:
		return "", errdefs.InvalidArgument("image archive is neither a docker save archive (manifest.json) nor an OCI image layout (oci-layout and index.json)")
	}
}

// extractLayoutTar unpacks an OCI image layout archive into dir. The archive
// is untrusted and only regular files and directories are accepted: with no
// symlinks in the tree, reading it (as go-containerregistry does, by path)
// can never reach outside dir. It holds at most maxFiles entries (its bytes
// are bounded by the archive's, which the caller bounded).
func extractLayoutTar(ctx context.Context, r io.Reader, dir string, maxFiles int64) error {
	tr := tar.NewReader(ctxReader{ctx: ctx, r: r})
	var n int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil && !(errors.Is(err, tar.ErrInsecurePath) && hdr != nil) {
			return tarErr(err)
		}
		if n++; n > maxFiles {
			return TooManyFiles("OCI layout archive", maxFiles)
		}
		name, err := cleanEntryName(hdr.Name)
		if err != nil {
			return fmt.Errorf("OCI layout archive: %w", err)
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return fmt.Errorf("OCI layout archive: %w", err)
			}
		case tar.TypeReg:
			if name == "" {
				return errdefs.InvalidArgument("OCI layout archive: a file names the archive's root")
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return fmt.Errorf("OCI layout archive: %w", err)
			}
			if err := writeFileFrom(target, tr); err != nil {
				return fmt.Errorf("OCI layout archive: %s: %w", name, err)
			}
		case tar.TypeXGlobalHeader:
		default:
			return errdefs.InvalidArgument("OCI layout archive: entry %q is neither a file nor a directory (type %q)", hdr.Name, hdr.Typeflag)
		}
	}
}

// writeFileFrom writes r to the file path, replacing it.
func writeFileFrom(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return tarErr(err)
	}
	return f.Close()
}

// importLayout imports the image of the OCI image layout in dir.
func (s *Store) importLayout(ctx context.Context, name, dir string, replace func(old *Image) error, logf func(format string, args ...any)) (*Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, errdefs.InvalidArgument("OCI layout: %s", errText(err, dir))
	}
	var cands []layoutCandidate
	if err := collectImages(idx, dir, 0, &cands); err != nil {
		return nil, err
	}
	c, err := pickImage(cands)
	if err != nil {
		return nil, err
	}
	img, err := c.index.Image(c.desc.Digest)
	if err != nil {
		return nil, errdefs.InvalidArgument("OCI layout: image %s: %s", c.desc.Digest, errText(err, dir))
	}
	return s.importImage(ctx, name, img, c.desc.Digest, dir, replace, logf)
}

// layoutCandidate is an image manifest of an OCI layout and the index that
// lists it.
type layoutCandidate struct {
	index v1.ImageIndex
	desc  v1.Descriptor
}

// maxIndexDepth bounds how deeply image indexes may nest.
const maxIndexDepth = 4

// collectImages appends the image manifests that idx lists, directly or
// through nested indexes, skipping build attestations. dir is the layout's
// directory, for errors.
func collectImages(idx v1.ImageIndex, dir string, depth int, out *[]layoutCandidate) error {
	if depth > maxIndexDepth {
		return errdefs.InvalidArgument("OCI layout: image indexes nest more than %d deep", maxIndexDepth)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return errdefs.InvalidArgument("OCI layout: bad index: %s", errText(err, dir))
	}
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsImage():
			if d.Annotations["vnd.docker.reference.type"] == "attestation-manifest" {
				continue
			}
			*out = append(*out, layoutCandidate{index: idx, desc: d})
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return errdefs.InvalidArgument("OCI layout: index %s: %s", d.Digest, errText(err, dir))
			}
			if err := collectImages(child, dir, depth+1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// pickImage chooses the image to import among an OCI layout's manifests:
// the only one, else the one for linux on this machine's architecture.
func pickImage(cands []layoutCandidate) (layoutCandidate, error) {
	// The same manifest may be listed twice (under two tags).
	var uniq []layoutCandidate
	seen := map[v1.Hash]bool{}
	for _, c := range cands {
		if !seen[c.desc.Digest] {
			seen[c.desc.Digest] = true
			uniq = append(uniq, c)
		}
	}
	switch len(uniq) {
	case 0:
		return layoutCandidate{}, errdefs.InvalidArgument("OCI layout holds no image manifest")
	case 1:
		return uniq[0], nil
	}
	want := "linux/" + runtime.GOARCH
	var match []layoutCandidate
	var platforms []string
	for _, c := range uniq {
		p := platformOf(c)
		platforms = append(platforms, p)
		if p == want {
			match = append(match, c)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return layoutCandidate{}, errdefs.InvalidArgument("OCI layout holds %d images (%s), none for %s", len(uniq), strings.Join(platforms, ", "), want)
	default:
		return layoutCandidate{}, errdefs.InvalidArgument("OCI layout holds %d images for %s; keep just one", len(match), want)
	}
}

// platformOf returns "os/arch" of an image manifest: from its descriptor,
// else from its config ("unknown" when neither says).
func platformOf(c layoutCandidate) string {
	if p := c.desc.Platform; p != nil && p.OS != "" {
		return p.OS + "/" + p.Architecture
	}
	img, err := c.index.Image(c.desc.Digest)
	if err != nil {
		return "unknown"
	}
	cfg, err := img.ConfigFile()
	if err != nil || cfg.OS == "" {
		return "unknown"
	}
	return cfg.OS + "/" + cfg.Architecture
}

// importImage commits img's layers, bottom first, and registers the image
// as name. digest names the content, for the image's Recipe; dir is the OCI
// layout img is read from ("" for none), for errors.
func (s *Store) importImage(ctx context.Context, name string, img v1.Image, digest v1.Hash, layoutDir string, replace func(old *Image) error, logf func(format string, args ...any)) (_ *Image, err error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, errdefs.InvalidArgument("image config: %s", errText(err, layoutDir))
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, errdefs.InvalidArgument("image layers: %s", errText(err, layoutDir))
	}
	if len(layers) == 0 {
		return nil, errdefs.InvalidArgument("image has no layers")
	}
	// The layers together are bounded (their uncompressed streams, their
	// entries), and a failed import removes the layers it committed that
	// no image uses, so that it leaves the store as it found it.
	budget := NewBudget(s.Bounds(), "image layers (together)")
	var fresh []string
	defer func() {
		if err != nil {
			s.dropLayers(ctx, fresh)
		}
	}()
	var ids []string
	parent := ""
	for i, l := range layers {
		diffID, err := l.DiffID()
		if err != nil {
			return nil, errdefs.InvalidArgument("layer %d: %s", i+1, errText(err, layoutDir))
		}
		id := ChainID(parent, "oci:"+diffID.String())
		cached := s.HasLayer(id)
		if !cached {
			layer := &Layer{ID: id, Parent: parent, CreatedBy: "oci layer " + diffID.String()}
			err := s.CommitLayer(ctx, layer, func(dir string) error {
				return extractLayer(ctx, l, diffID, dir, layoutDir, budget)
			})
			if err != nil {
				return nil, fmt.Errorf("import image %q: layer %d/%d %s: %w", name, i+1, len(layers), diffID, err)
			}
			fresh = append(fresh, id)
		}
		rec, err := s.GetLayer(id)
		if err != nil {
			return nil, fmt.Errorf("import image %q: %w", name, err)
		}
		line := fmt.Sprintf("layer %d/%d %s %s", i+1, len(layers), shortDigest(diffID), units.Bytes(rec.SizeBytes))
		if cached {
			line += " (cached)"
		}
		logf("%s", line)
		ids = append(ids, id)
		parent = id
	}

	im := &Image{
		Name:    name,
		Layers:  ids,
		Base:    "oci",
		Recipe:  "oci/" + digest.String(),
		Env:     append([]string(nil), cfg.Config.Env...),
		WorkDir: "/",
		User:    cfg.Config.User,
	}
	if !hasEnv(im.Env, "PATH") {
		im.Env = append(im.Env, ociDefaultPath)
	}
	if wd := cfg.Config.WorkingDir; wd != "" {
		im.WorkDir = path.Join("/", wd)
	}
	uid, gid, err := s.resolveUser(ids, cfg.Config.User)
	if err != nil {
		return nil, err
	}
	if uid == 0 {
		// forkbox never runs sandbox code as root: an image made to run
		// as root (most are) runs as the sandbox user instead.
		logf("image runs as root (user %q); forkbox runs sandbox code as %d:%d instead", cfg.Config.User, userUID, userGID)
		uid, gid = userUID, userGID
	}
	im.UID, im.GID = uid, gid
	if err := s.Register(ctx, im, replace); err != nil {
		return nil, err
	}
	return im, nil
}

// extractLayer extracts layer l into dir in overlayfs's format, checking
// that its uncompressed content is the one diffID names: layer ids derive
// from diff ids, so an unchecked layer could poison the cache of every image
// that shares its id. layoutDir is the OCI layout l is read from ("" for
// none), for errors. budget counts its uncompressed stream and entries.
func extractLayer(ctx context.Context, l v1.Layer, diffID v1.Hash, dir, layoutDir string, budget *Budget) error {
	h, err := v1.Hasher(diffID.Algorithm)
	if err != nil {
		return errdefs.InvalidArgument("diff id %s: %v", diffID, err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return errdefs.InvalidArgument("cannot read layer: %s", errText(err, layoutDir))
	}
	defer rc.Close()
	r := io.TeeReader(ctxReader{ctx: ctx, r: rc}, h)
	if err := ExtractTar(ctx, r, dir, ExtractOptions{Whiteouts: true, KeepOwners: true, Budget: budget}); err != nil {
		return err
	}
	// Hash what follows the end-of-archive marker too (within the bound:
	// gigabytes of zeros there would cost only time, but no less of it).
	if _, err := io.Copy(io.Discard, budget.Reader(r)); err != nil {
		return tarErr(err)
	}
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != diffID.Hex {
		return errdefs.InvalidArgument("layer content does not match its diff id %s (it is %s:%s)", diffID, diffID.Algorithm, got)
	}
	return nil
}

// dropLayers removes the layers ids (committed by an import that then
// failed) that no image uses, as the layer gc would an hour later: under
// the store's lock, each renamed away before it is deleted.
func (s *Store) dropLayers(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	unlock, err := s.lock()
	if err != nil {
		return // the gc removes them later
	}
	defer unlock()
	imgs, err := s.List(context.WithoutCancel(ctx))
	if err != nil {
		return
	}
	used := map[string]bool{}
	for _, img := range imgs {
		for _, id := range img.Layers {
			used[id] = true
		}
	}
	root := filepath.Join(s.dir, layersDir)
	for _, id := range ids {
		if used[id] || !validLayerID(id) {
			continue
		}
		gone := filepath.Join(root, tmpPrefix+"drop-"+id)
		if os.Rename(filepath.Join(root, id), gone) == nil {
			os.RemoveAll(gone)
		}
	}
}

// errText is err's message without the path of dir (the temporary copy
// of an OCI layout, which means nothing to the user), saying so when a blob
// is missing.
func errText(err error, dir string) string {
	msg := err.Error()
	if dir != "" {
		msg = strings.ReplaceAll(msg, dir+string(filepath.Separator), "")
	}
	if errors.Is(err, fs.ErrNotExist) {
		msg += " (the archive lacks this blob)"
	}
	return msg
}

// hasEnv reports whether env sets key.
func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}

// shortDigest abbreviates a digest for progress lines.
func shortDigest(h v1.Hash) string {
	if len(h.Hex) <= 12 {
		return h.String()
	}
	return h.Algorithm + ":" + h.Hex[:12] + "…"
}

// resolveUser turns an OCI config's user ("uid", "uid:gid", "name",
// "name:group", ...) into numeric ids, looking names up in the image's
// /etc/passwd and /etc/group (layers are ids, bottom first). Like Docker, a
// user without a group takes its passwd entry's group, or 0 when it has
// none. An empty user is root.
func (s *Store) resolveUser(layers []string, user string) (uid, gid int, err error) {
	if user == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	if u == "" {
		return 0, 0, errdefs.InvalidArgument("image user %q names no user", user)
	}
	var passwd [][]string
	loadPasswd := func() error {
		if passwd != nil {
			return nil
		}
		data, err := s.readImageFile(layers, "etc/passwd")
		if err != nil {
			return err
		}
		passwd = parseColonFile(data, 4)
		return nil
	}

	primary := -1 // the passwd entry's group
	if id, ok := parseID(u); ok {
		uid = id
		if !hasGroup {
			if err := loadPasswd(); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return 0, 0, err
			}
			for _, e := range passwd {
				if e[2] == u {
					primary, _ = parseID(e[3])
					break
				}
			}
		}
	} else {
		err := loadPasswd()
		switch {
		case errors.Is(err, fs.ErrNotExist) && u == "root":
			// Minimal images name root without a passwd file.
			passwd = [][]string{{"root", "x", "0", "0"}}
		case errors.Is(err, fs.ErrNotExist):
			return 0, 0, errdefs.InvalidArgument("image user %q: the image has no /etc/passwd", user)
		case err != nil:
			return 0, 0, err
		}
		found := false
		for _, e := range passwd {
			if e[0] != u {
				continue
			}
			id, ok := parseID(e[2])
			if !ok {
				return 0, 0, errdefs.InvalidArgument("image user %q: bad uid %q in /etc/passwd", user, e[2])
			}
			uid, found = id, true
			primary, _ = parseID(e[3])
			break
		}
		if !found {
			return 0, 0, errdefs.InvalidArgument("image user %q not found in the image's /etc/passwd", u)
		}
	}

	switch {
	case !hasGroup && primary >= 0:
		return uid, primary, nil
	case !hasGroup:
		return uid, 0, nil
	}
	if g == "" {
		return 0, 0, errdefs.InvalidArgument("image user %q names no group", user)
	}
	if id, ok := parseID(g); ok {
		return uid, id, nil
	}
	data, err := s.readImageFile(layers, "etc/group")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, errdefs.InvalidArgument("image user %q: the image has no /etc/group", user)
	}
	if err != nil {
		return 0, 0, err
	}
	for _, e := range parseColonFile(data, 3) {
		if e[0] == g {
			id, ok := parseID(e[2])
			if !ok {
				return 0, 0, errdefs.InvalidArgument("image user %q: bad gid %q in /etc/group", user, e[2])
			}
			return uid, id, nil
		}
	}
	return 0, 0, errdefs.InvalidArgument("image group %q not found in the image's /etc/group", g)
}

// parseID parses a uid or gid (0 to 2^31-2; -1 means "unchanged" to chown).
func parseID(s string) (int, bool) {
	n, err := strconv.ParseUint(s, 10, 31)
	if err != nil || n == 1<<31-1 {
		return 0, false
	}
	return int(n), true
}

// parseColonFile splits the lines of a passwd-style file into fields,
// skipping blank lines, comments and lines with fewer than min fields.
func parseColonFile(data []byte, min int) [][]string {
	var out [][]string
	for line := range bytes.Lines(data) {
		l := strings.TrimRight(string(line), "\r\n")
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, ":")
		if len(f) >= min {
			out = append(out, f)
		}
	}
	return out
}

// maxImageFile bounds the size of /etc/passwd and /etc/group read from an
// image.
const maxImageFile = 4 << 20

// readImageFile reads the file rel (such as "etc/passwd") as the image made
// of layers (ids, bottom first) shows it: from the top-most layer that has
// it, unless a layer above deletes it (a whiteout, or an opaque directory on
// the way). Only regular files are read, and never through a symlink: the
// layers' contents are untrusted. The error wraps fs.ErrNotExist when the
// image has no such file.
func (s *Store) readImageFile(layers []string, rel string) ([]byte, error) {
	parts := strings.Split(rel, "/")
	for i := len(layers) - 1; i >= 0; i-- {
		root := s.LayerDir(layers[i])
		p := root
		stop := false
		for j, part := range parts {
			p = filepath.Join(p, part)
			fi, err := os.Lstat(p)
			if errors.Is(err, fs.ErrNotExist) {
				// Not in this layer; an opaque parent hides the
				// lower layers' copy.
				stop = j > 0 && isOpaqueDir(filepath.Dir(p))
				break
			}
			if err != nil {
				return nil, fmt.Errorf("read image file /%s: %w", rel, err)
			}
			last := j == len(parts)-1
			switch {
			case last && fi.Mode().IsRegular():
				if fi.Size() > maxImageFile {
					return nil, errdefs.InvalidArgument("image file /%s is too large (%d bytes)", rel, fi.Size())
				}
				data, err := os.ReadFile(p)
				if err != nil {
					return nil, fmt.Errorf("read image file /%s: %w", rel, err)
				}
				return data, nil
			case !last && fi.IsDir():
				continue
			default:
				// A whiteout deletes it; a symlink or another kind
				// of file is not followed.
				stop = true
			}
			break
		}
		if stop {
			break
		}
	}
	return nil, fmt.Errorf("image file /%s: %w", rel, fs.ErrNotExist)
}
