// Package image manages forkbox images: read-only root filesystems plus the
// defaults (environment, working directory, user) a sandbox starts with.
//
// A Store keeps its images under <data-dir>/images (or --images-dir):
//
//	<dir>/<name>/image.json   the Image metadata: its layers and defaults
//	<dir>/.layers/<id>/       the shared layers images stack (layers.go)
//	<dir>/host/rootfs/        the host-derived image's own small root
//	<dir>/.lock               serializes changes across processes sharing <dir>
//
// An image appears all at once: it is built under a temporary name in <dir>
// and renamed into place, so Get and List never see a half-built image, and a
// crash mid-build leaves only a temporary directory that the next Open
// removes. Images capture no runtime state.
//
// Images are stacks of content-addressed layers (layers.go) made by recipe
// builds (internal/build) and OCI imports (oci.go), plus the host-derived
// image built by EnsureHostPython: a skeleton root whose /usr is the host's
// own, bind-mounted read-only when a sandbox starts.
//
// The nodes of a cluster share images through object storage (remote.go):
// with SetRemote, Register uploads and Get fetches what is missing. The host
// image, and any image made of the host's paths, never leaves its node.
package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/internal/durable"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/lazyre"
)

// DefaultImage is the image a sandbox starts from when none is named: the
// data-science image built from images/python.yaml.
const DefaultImage = "python"

// HostImage is the host-derived image (EnsureHostPython): the host's own /usr
// under a small root of forkbox's. It needs no build and no network, and
// brings the host's R kernel as well.
const HostImage = "host"

// metaFile is the name of an image's metadata file inside its directory.
const metaFile = "image.json"

// tmpMark starts the names of directories that are being built or
// replaced; the writing process's pid follows it (tmpPrefix). Several
// processes may share one store (daemons, `forkbox prepare`), so Open
// removes only the leftovers of processes that are gone — never a build
// under way in another one. List skips them all.
const tmpMark = ".tmp-"

// tmpPrefix starts the names of this process's temporary entries.
var tmpPrefix = fmt.Sprintf("%s%d-", tmpMark, os.Getpid())

// TempPrefix is the name prefix of this process's temporary entries in a
// store's directory (a build's context, say), which opening the store
// elsewhere leaves alone while this process lives.
func TempPrefix() string { return tmpPrefix }

// leftover reports whether name is a temporary entry whose process is gone
// (or of a format without a pid).
func leftover(name string) bool {
	rest, ok := strings.CutPrefix(name, tmpMark)
	if !ok {
		return false
	}
	pidText, _, found := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidText)
	if !found || err != nil || pid <= 0 {
		return true
	}
	err = syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH)
}

// Image is a read-only root filesystem plus the defaults a sandbox starts
// with. The runtime mounts LowerDirs as the overlay's lower dirs, then
// applies Binds in order (a bind may land inside an earlier one), then runs
// the sandbox's processes as UID:GID in WorkDir with Env.
//
// A built or imported image is a stack of shared layers (Layers). The
// host-derived image is a single directory (RootFS) completed by Binds. An
// image built on top of the host-derived one has both: RootFS at the bottom,
// Layers above it.
type Image struct {
	Name string `json:"name"`
	// ID digests the layers and defaults ("sha256:..."); it changes when a
	// rebuild changes anything.
	ID string `json:"id,omitempty"`
	// RootFS, when set, is the absolute path of the bottom lower dir.
	RootFS string `json:"rootfs,omitempty"`
	// Layers are layer ids, bottom first.
	Layers []string `json:"layers,omitempty"`
	// Binds are host paths bind-mounted into the sandbox root, in order.
	Binds []Bind `json:"binds"`
	// Env holds KEY=VALUE defaults (PATH, HOME, LANG, ...).
	Env     []string `json:"env"`
	WorkDir string   `json:"workdir"`
	UID     int      `json:"uid"`
	GID     int      `json:"gid"`
	// User is the run user as the recipe or OCI config named it.
	User string `json:"user,omitempty"`
	// Base says what the image was built on: "debian:bookworm", another
	// image's name, "oci" for an import, "host" for the host-derived image.
	Base string `json:"base,omitempty"`
	// CreatedAt is when the image was built.
	CreatedAt time.Time `json:"created_at"`
	// SizeBytes is the apparent size of its layers (or of RootFS), not
	// counting what Binds bring in.
	SizeBytes int64 `json:"size_bytes"`
	// Recipe names how the image was built and which version of that
	// recipe, such as "host-python/1" or "recipe/<digest>". A store
	// rebuilds a derived image when its recipe version changes.
	Recipe string `json:"recipe,omitempty"`

	// LowerDirs are the overlay's lower dirs, top first: the layers' trees
	// then RootFS. Filled in by the store; not stored.
	LowerDirs []string `json:"-"`
}

// fill computes the fields derived from where the store keeps things.
func (img *Image) fill(s *Store) {
	img.LowerDirs = img.LowerDirs[:0]
	for i := len(img.Layers) - 1; i >= 0; i-- {
		img.LowerDirs = append(img.LowerDirs, s.LayerDir(img.Layers[i]))
	}
	if img.RootFS != "" {
		img.LowerDirs = append(img.LowerDirs, img.RootFS)
	}
}

// Bind is a host path mounted into the sandbox root at Target.
type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
}

// Store is the set of images under one directory. It is safe for concurrent
// use by the goroutines of one process; one data directory belongs to one
// daemon.
type Store struct {
	dir string
	// mu serializes builds; reads need no lock because images are
	// replaced by rename.
	mu sync.Mutex
	// gcGrace keeps unreferenced layers this long (defaultGCGrace).
	gcGrace time.Duration
	// bounds limit imports and builds (SetBounds; zero: DefaultBounds).
	bounds Bounds
	// rem shares images through object storage (remote.go).
	rem remoteState
}

// Open returns the store at dir, creating the directory if needed and
// removing leftovers of builds that a crash interrupted.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image store %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	for _, e := range entries {
		if leftover(e.Name()) {
			if err := os.RemoveAll(filepath.Join(abs, e.Name())); err != nil {
				return nil, fmt.Errorf("image store: remove leftover build: %w", err)
			}
		}
	}
	return &Store{dir: abs, gcGrace: defaultGCGrace}, nil
}

// Dir returns the store's absolute directory.
func (s *Store) Dir() string { return s.dir }

// validName is an image name: a tenant's own images carry their tenant
// first ("acme+tools"; the daemon maps names, see package sandbox).
var validName = lazyre.New(`^([a-z0-9][a-z0-9-]{0,31}\+)?[a-z0-9][a-z0-9._-]{0,63}$`)

// Get returns the image called name. The error wraps errdefs.ErrNotFound
// when there is none, and errdefs.ErrInvalidArgument for a malformed name.
// With a remote (SetRemote), an image this store lacks is fetched from it
// first (remote.go).
func (s *Store) Get(ctx context.Context, name string) (*Image, error) {
	img, err := s.getLocal(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) && name != HostImage {
		if r := s.remote(); r != nil {
			return s.fetch(ctx, r, name, err)
		}
	}
	return img, err
}

// getLocal is Get without fetching.
func (s *Store) getLocal(ctx context.Context, name string) (*Image, error) {
	if !validName.MatchString(name) {
		return nil, errdefs.InvalidArgument("invalid image name %q: use lowercase letters, digits, '.', '_' and '-'", name)
	}
	data, err := os.ReadFile(filepath.Join(s.dir, name, metaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errdefs.NotFound("image %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", name, err)
	}
	var img Image
	if err := json.Unmarshal(data, &img); err != nil {
		return nil, fmt.Errorf("image %q: corrupt %s: %w", name, metaFile, err)
	}
	img.fill(s)
	return &img, nil
}

// List returns every image, sorted by name.
func (s *Store) List(ctx context.Context) ([]*Image, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	var out []*Image
	for _, e := range entries {
		if !e.IsDir() || !validName.MatchString(e.Name()) {
			continue
		}
		img, err := s.getLocal(ctx, e.Name())
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// writeMeta writes img as dir/image.json durably.
func writeMeta(dir string, img *Image) error {
	data, err := json.MarshalIndent(img, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(dir, metaFile), append(data, '\n'), 0o644)
}

// syncDir fsyncs a directory so that renames inside it are durable.
func syncDir(dir string) error { return durable.SyncDir(dir) }

// treeSize returns the apparent size of the regular files and symlinks
// under root, without following symlinks.
func treeSize(root string) (int64, error) {
	var n int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0 {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}
