package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/textcut"
)

// Layers live in <dir>/.layers, one directory per layer, shared by every
// image that stacks it:
//
//	<dir>/.layers/<id>/fs/          the layer's tree, in overlayfs's own format
//	                                (whiteouts are 0:0 character devices, opaque
//	                                directories carry trusted.overlay.opaque=y)
//	<dir>/.layers/<id>/layer.json   its Layer record
//
// A layer's id is a chain digest: the sha256 of its parent's id and of what
// made it (a recipe step, a debootstrap, an OCI layer's diff id). Equal ids
// mean equal content, which is how an unchanged recipe prefix is found in the
// cache and how two images share their common layers. A layer appears all at
// once (built in a temporary directory, renamed into place).
const layersDir = ".layers"

// Layer describes one read-only layer.
type Layer struct {
	ID        string    `json:"id"`
	Parent    string    `json:"parent,omitempty"`
	CreatedBy string    `json:"created_by"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
}

// ChainID returns the id of the layer that what makes on top of parent
// (parent "" for a bottom layer).
func ChainID(parent, what string) string {
	h := sha256.New()
	h.Write([]byte(parent))
	h.Write([]byte{0})
	h.Write([]byte(what))
	return hex.EncodeToString(h.Sum(nil))
}

func validLayerID(id string) bool {
	if len(id) != 64 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

// LayerDir returns the directory that holds the tree of layer id (the
// overlay lower dir).
func (s *Store) LayerDir(id string) string {
	return filepath.Join(s.dir, layersDir, id, "fs")
}

// HasLayer reports whether layer id is committed.
func (s *Store) HasLayer(id string) bool {
	if !validLayerID(id) {
		return false
	}
	_, err := os.Stat(filepath.Join(s.dir, layersDir, id, "layer.json"))
	return err == nil
}

// GetLayer returns layer id's record.
func (s *Store) GetLayer(id string) (*Layer, error) {
	if !validLayerID(id) {
		return nil, errdefs.InvalidArgument("invalid layer id %q", id)
	}
	data, err := os.ReadFile(filepath.Join(s.dir, layersDir, id, "layer.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errdefs.NotFound("layer %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", id, err)
	}
	var l Layer
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("layer %s: corrupt layer.json: %w", id, err)
	}
	return &l, nil
}

// CommitLayer creates layer l.ID by calling fill with an empty directory
// (owned by root, mode 0755) that becomes the layer's tree, then moving it
// into place. If the layer already exists (built by another build meanwhile)
// the new copy is dropped and the existing one kept: equal ids are equal
// content. l.SizeBytes and l.CreatedAt are filled in.
//
// A full disk (ENOSPC met by fill or by the commit itself) is
// errdefs.ErrInsufficientStorage naming the store's filesystem, with what
// had been written as the need's lower bound; the half-written layer is
// removed, as on every failure.
func (s *Store) CommitLayer(ctx context.Context, l *Layer, fill func(dir string) error) (err error) {
	if !validLayerID(l.ID) {
		return fmt.Errorf("commit layer: invalid id %q", l.ID)
	}
	if s.HasLayer(l.ID) {
		return nil
	}
	// Root only: layers hold setuid files and device nodes, harmless
	// under a sandbox's nosuid,nodev overlay but not to other host users.
	root := filepath.Join(s.dir, layersDir)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("commit layer: %w", err)
	}
	if err := os.Chmod(root, 0o700); err != nil {
		return fmt.Errorf("commit layer: %w", err)
	}
	tmp, err := os.MkdirTemp(root, tmpPrefix)
	if err != nil {
		return fmt.Errorf("commit layer: %w", err)
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "fs")
	defer func() { // before the removal above: it measures what was written
		if diskspace.IsFull(err) {
			written, _ := treeSize(tree)
			if e := (*diskspace.Error)(nil); !errors.As(err, &e) {
				err = diskspace.Full(root, "layer "+l.ID[:12]+" ("+textcut.Prefix(l.CreatedBy, 80)+")", written, true, err)
			}
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("commit layer: %w", err)
	}
	if err := os.Mkdir(tree, 0o755); err != nil {
		return fmt.Errorf("commit layer: %w", err)
	}
	if err := os.Chmod(tree, 0o755); err != nil {
		return fmt.Errorf("commit layer: %w", err)
	}
	if err := fill(tree); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	size, err := treeSize(tree)
	if err != nil {
		return fmt.Errorf("commit layer: %w", err)
	}
	l.SizeBytes = size
	l.CreatedAt = time.Now().UTC()
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "layer.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("commit layer: %w", err)
	}
	if err := syncFS(tmp); err != nil {
		return fmt.Errorf("commit layer: %w", err)
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	err = os.Rename(tmp, filepath.Join(root, l.ID))
	if err != nil && s.HasLayer(l.ID) {
		return nil // another build committed the same layer first
	}
	if err != nil {
		return fmt.Errorf("commit layer: %w", err)
	}
	return syncDir(root)
}

// Register makes img visible under img.Name, replacing an image of that name.
// Every layer it names must be committed. replace, when not nil, is called
// with the image being replaced (under the store's lock) and may refuse; it
// is not called when the image would not change (same layers and defaults),
// and then the registered image is left as it was and returned in img. The
// layers that no image uses any more are removed afterwards.
//
// With a remote (SetRemote), the image is then uploaded; a failed upload is
// logged and retried later, never returned (remote.go).
func (s *Store) Register(ctx context.Context, img *Image, replace func(old *Image) error) error {
	if err := s.register(ctx, img, replace); err != nil {
		return diskspace.Map(err, s.dir, "the record of image "+img.Name, 0)
	}
	s.publishAfterRegister(ctx, img)
	return nil
}

// register is Register without the upload (a fetch registers with it).
func (s *Store) register(ctx context.Context, img *Image, replace func(old *Image) error) error {
	if !validName.MatchString(img.Name) {
		return errdefs.InvalidArgument("invalid image name %q: use lowercase letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit)", img.Name)
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	for _, id := range img.Layers {
		if !s.HasLayer(id) {
			return fmt.Errorf("register image %q: layer %s is missing (removed meanwhile; build again)", img.Name, id)
		}
	}
	img.ID = imageID(img)
	old, err := s.getLocal(ctx, img.Name)
	switch {
	case err == nil && old.ID == img.ID:
		*img = *old
		return nil
	case err == nil:
		if replace != nil {
			if err := replace(old); err != nil {
				return err
			}
		}
	case !errors.Is(err, errdefs.ErrNotFound):
		return err
	}
	var size int64
	for _, id := range img.Layers {
		l, err := s.GetLayer(id)
		if err != nil {
			return err
		}
		size += l.SizeBytes
	}
	img.SizeBytes = size
	if img.CreatedAt.IsZero() {
		img.CreatedAt = time.Now().UTC()
	}
	final := filepath.Join(s.dir, img.Name)
	tmp, err := os.MkdirTemp(s.dir, tmpPrefix+img.Name+"-")
	if err != nil {
		return fmt.Errorf("register image %q: %w", img.Name, err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := writeMeta(tmp, img); err != nil {
		return fmt.Errorf("register image %q: %w", img.Name, err)
	}
	if err := swapIn(tmp, final); err != nil {
		return fmt.Errorf("register image %q: %w", img.Name, err)
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}
	img.fill(s)
	return s.gcLocked(ctx)
}

// Remove deletes image name. inUse, when not nil, is called under the store's
// lock and may refuse (an image that sandboxes or snapshots use). Layers no
// other image uses are removed with it.
//
// With a remote, the image's record there is removed first (an image only
// there is removed from there alone), so that no node fetches it again;
// its layers stay in the bucket.
func (s *Store) Remove(ctx context.Context, name string, inUse func(img *Image) error) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	img, err := s.getLocal(ctx, name)
	local := err == nil
	if errors.Is(err, errdefs.ErrNotFound) && validName.MatchString(name) {
		img, err = s.remoteOnly(ctx, name)
	}
	if err != nil {
		return err
	}
	if inUse != nil {
		if err := inUse(img); err != nil {
			return err
		}
	}
	if err := s.unpublish(ctx, name); err != nil {
		return err
	}
	if !local {
		return nil
	}
	// Rename first so that the image disappears at once, then delete.
	gone, err := os.MkdirTemp(s.dir, tmpPrefix+"rm-")
	if err != nil {
		return fmt.Errorf("remove image %q: %w", name, err)
	}
	if err := os.Rename(filepath.Join(s.dir, name), filepath.Join(gone, name)); err != nil {
		os.RemoveAll(gone)
		return fmt.Errorf("remove image %q: %w", name, err)
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("remove image %q: %w", name, err)
	}
	return s.gcLocked(ctx)
}

// defaultGCGrace is how long an unreferenced layer is kept: a build commits
// its layers one by one and registers its image only at the end, and
// meanwhile those layers are the lower dirs of its next build sandboxes —
// possibly in another daemon sharing the store.
const defaultGCGrace = time.Hour

// gcLocked removes the layers that no image names and that are older than
// s.gcGrace. The caller holds the store's lock.
func (s *Store) gcLocked(ctx context.Context) error {
	imgs, err := s.List(ctx)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	for _, img := range imgs {
		for _, id := range img.Layers {
			used[id] = true
		}
	}
	root := filepath.Join(s.dir, layersDir)
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("layer gc: %w", err)
	}
	for _, e := range entries {
		if !validLayerID(e.Name()) || used[e.Name()] {
			continue
		}
		if fi, err := os.Stat(filepath.Join(root, e.Name(), "layer.json")); err == nil && time.Since(fi.ModTime()) < s.gcGrace {
			continue
		}
		// Rename away first: a half-deleted layer must never look committed.
		gone := filepath.Join(root, tmpPrefix+"gc-"+e.Name())
		if err := os.Rename(filepath.Join(root, e.Name()), gone); err != nil {
			return fmt.Errorf("layer gc: %w", err)
		}
		if err := os.RemoveAll(gone); err != nil {
			return fmt.Errorf("layer gc: %w", err)
		}
	}
	return nil
}

// imageID digests what an image is: its layers and its defaults.
func imageID(img *Image) string {
	cfg, _ := json.Marshal(struct {
		RootFS  string   `json:"rootfs"`
		Layers  []string `json:"layers"`
		Binds   []Bind   `json:"binds"`
		Env     []string `json:"env"`
		WorkDir string   `json:"workdir"`
		UID     int      `json:"uid"`
		GID     int      `json:"gid"`
	}{img.RootFS, img.Layers, img.Binds, img.Env, img.WorkDir, img.UID, img.GID})
	sum := sha256.Sum256(cfg)
	return "sha256:" + hex.EncodeToString(sum[:])
}
