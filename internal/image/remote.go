package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/forkbox/forkbox/internal/durable"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// Images in object storage. The nodes of a cluster share one bucket, and an
// image built or imported on one node is usable on every other: with a
// Remote set (SetRemote), Register uploads the image once it is committed
// locally, and Get fetches a name it does not hold locally from the bucket.
// The keys, under the bucket's prefix:
//
//	layers/<id>/<sha256>.tar  the layer's tree as a layer tar (layertar_linux.go), keyed by its content too (remoteLayerTarKey)
//	layers/<id>.json          its RemoteLayer record: the Layer plus the tar's
//	                          sha256 and size (written after the tar)
//	images/<name>/image.json  the image's RemoteImage record: the Image plus
//	                          the RemoteLayer of each of its layers (written
//	                          last, so that it names only complete layers)
//
// <name> is the store's own name for the image: a tenant's image is
// "<tenant>+<name>" here as on disk (package sandbox maps names).
//
// Uploads happen after the local commit and never fail a build: an upload
// that fails is logged, remembered in <dir>/.remote-pending/<name>, and
// retried when the store next gets a remote (daemon start) and on this
// store's next Get miss. A fetch downloads the record, then each layer it
// lacks — verifying the tar's sha256 while extracting it into a temporary
// directory that is renamed into place only when every byte matched — then
// registers the image as a local build would. Fetches of one image, and of
// one layer, are serialized in this process; layers committed by another
// process sharing the directory are taken as they are (CommitLayer).
//
// Removing an image removes its record from the bucket first (else this or
// another node would fetch it back). Layers stay: other images may share
// them. Collecting unreferenced layer objects is left to a future GC.
//
// The host-derived image (HostImage) is never uploaded nor fetched: it binds
// the host's own /usr and every node derives its own. Nor is any image with
// a RootFS or Binds (one built on top of the host image): it is made of
// this host's paths. The default image ("python", built by forkbox prepare
// on every node) is uploaded and fetched like any other.

// Remote is the object store images are shared through; *blob.S3 is one.
// A missing object is an errdefs.ErrNotFound error.
type Remote interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (size int64, modTime time.Time, err error)
	Delete(ctx context.Context, key string) error
}

// RemoteLayer is a layer's record in the bucket.
type RemoteLayer struct {
	Layer
	// SHA256 is the hex sha256 of the layer tar, TarSize its length.
	SHA256  string `json:"sha256"`
	TarSize int64  `json:"tar_size"`
}

// RemoteImage is an image's record in the bucket.
type RemoteImage struct {
	Image Image `json:"image"`
	// Layers are the records of Image.Layers, in the same order.
	Layers []RemoteLayer `json:"layers"`
}

const (
	pendingDir = ".remote-pending"
	// maxRemoteRecord bounds a downloaded record.
	maxRemoteRecord = 4 << 20
)

// remoteLayerTarKey is where the layer tar of layer id with sha256 sum is:
// keyed by its content too, so that two nodes that upload one layer at once
// (each built it, with its own timestamps) never pair one's record with the
// other's tar: every record names a tar that is there and matches it.
func remoteLayerTarKey(id, sum string) string { return "layers/" + id + "/" + sum + ".tar" }
func remoteLayerMetaKey(id string) string     { return "layers/" + id + ".json" }
func remoteImageKey(name string) string       { return "images/" + name + "/" + metaFile }

// remoteState is a Store's object store and its per-key locks.
type remoteState struct {
	mu       sync.Mutex
	rem      Remote
	log      *slog.Logger
	keys     map[string]*keyLock
	retrying bool
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// SetRemote shares the store's images through object store r (see above).
// Call it once, before the store is used; uploads that an earlier run left
// pending are retried in the background.
func (s *Store) SetRemote(r Remote) {
	s.rem.mu.Lock()
	s.rem.rem = r
	s.rem.mu.Unlock()
	s.kickPending()
}

// SetLogger sets where the store reports failed uploads (default
// slog.Default()).
func (s *Store) SetLogger(l *slog.Logger) {
	s.rem.mu.Lock()
	s.rem.log = l
	s.rem.mu.Unlock()
}

func (s *Store) remote() Remote {
	s.rem.mu.Lock()
	defer s.rem.mu.Unlock()
	return s.rem.rem
}

func (s *Store) logger() *slog.Logger {
	s.rem.mu.Lock()
	defer s.rem.mu.Unlock()
	if s.rem.log != nil {
		return s.rem.log
	}
	return slog.Default()
}

// lockKey takes the in-process lock of one image ("image:<name>") or layer
// ("layer:<id>").
func (s *Store) lockKey(key string) (unlock func()) {
	s.rem.mu.Lock()
	if s.rem.keys == nil {
		s.rem.keys = map[string]*keyLock{}
	}
	l := s.rem.keys[key]
	if l == nil {
		l = &keyLock{}
		s.rem.keys[key] = l
	}
	l.refs++
	s.rem.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.rem.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.rem.keys, key)
		}
		s.rem.mu.Unlock()
	}
}

// shareable reports whether img may go to the bucket.
func shareable(img *Image) bool {
	return img.Name != HostImage && img.RootFS == "" && len(img.Binds) == 0
}

// publishAfterRegister uploads a just registered image, logging (not
// returning) a failure: the image works locally, and the upload is retried.
func (s *Store) publishAfterRegister(ctx context.Context, img *Image) {
	if s.remote() == nil {
		return
	}
	if !shareable(img) {
		if img.Name != HostImage {
			s.logger().Info("image stays on this node: it is built on the host image, whose paths are this host's", "image", img.Name)
		}
		return
	}
	if err := s.Publish(ctx, img.Name); err != nil {
		s.logger().Warn("image is usable on this node only for now: upload to the object store failed; it is retried at the next start",
			"image", img.Name, "err", err)
	}
}

// Publish uploads image name (as it is now on disk) to the remote: the
// layers the bucket lacks, then the image's record. Until it succeeds the
// image is marked pending, for RetryPending. Publishing an image that is not
// shareable, or without a remote, does nothing.
func (s *Store) Publish(ctx context.Context, name string) error {
	r := s.remote()
	if r == nil {
		return nil
	}
	defer s.lockKey("image:" + name)()
	img, err := s.getLocal(ctx, name)
	if err != nil {
		return err
	}
	if !shareable(img) {
		return nil
	}
	if err := s.markPending(img); err != nil {
		return fmt.Errorf("upload image %q: %w", name, err)
	}
	rec := RemoteImage{Image: *img}
	rec.Image.LowerDirs = nil
	for _, id := range img.Layers {
		rl, err := s.publishLayer(ctx, r, id)
		if err != nil {
			return fmt.Errorf("upload image %q: %w", name, err)
		}
		rec.Layers = append(rec.Layers, *rl)
	}
	data, err := json.MarshalIndent(&rec, "", "  ")
	if err != nil {
		return err
	}
	if err := r.Put(ctx, remoteImageKey(name), bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("upload image %q: %w", name, err)
	}
	s.clearPending(name, img.ID)
	return nil
}

// publishLayer uploads layer id unless the bucket has it, and returns its
// record.
func (s *Store) publishLayer(ctx context.Context, r Remote, id string) (*RemoteLayer, error) {
	defer s.lockKey("layer:" + id)()
	rl, err := getRemoteLayer(ctx, r, id)
	if err == nil {
		if size, _, err := r.Stat(ctx, remoteLayerTarKey(id, rl.SHA256)); err == nil && size == rl.TarSize {
			return rl, nil
		}
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	l, err := s.GetLayer(id)
	if err != nil {
		return nil, err
	}
	// Spool the tar to learn its size and sum before sending it.
	f, err := os.CreateTemp(s.dir, tmpPrefix+"upload-")
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", id, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	if err := writeLayerTar(ctx, s.LayerDir(id), cw); err != nil {
		return nil, fmt.Errorf("layer %s: %w", id, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("layer %s: %w", id, err)
	}
	rl = &RemoteLayer{Layer: *l, SHA256: hex.EncodeToString(h.Sum(nil)), TarSize: cw.n}
	if err := r.Put(ctx, remoteLayerTarKey(id, rl.SHA256), f, cw.n); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(rl, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := r.Put(ctx, remoteLayerMetaKey(id), bytes.NewReader(data), int64(len(data))); err != nil {
		return nil, err
	}
	return rl, nil
}

func getRemoteLayer(ctx context.Context, r Remote, id string) (*RemoteLayer, error) {
	var rl RemoteLayer
	if err := getRecord(ctx, r, remoteLayerMetaKey(id), &rl); err != nil {
		return nil, err
	}
	if rl.ID != id || !isHex64(rl.SHA256) || rl.TarSize < 0 {
		return nil, errdefs.FailedPrecondition("layer %s: its record in the object store is corrupt", id)
	}
	return &rl, nil
}

// getRecord downloads the JSON object key into v.
func getRecord(ctx context.Context, r Remote, key string, v any) error {
	rc, err := r.Get(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxRemoteRecord+1))
	if err != nil {
		return fmt.Errorf("read %s from the object store: %w", key, err)
	}
	if len(data) > maxRemoteRecord {
		return errdefs.FailedPrecondition("%s in the object store is over %d bytes", key, maxRemoteRecord)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return errdefs.FailedPrecondition("%s in the object store is corrupt: %v", key, err)
	}
	return nil
}

// fetch brings image name from the remote. notFound is the local miss, the
// answer when the bucket has no such image either.
func (s *Store) fetch(ctx context.Context, r Remote, name string, notFound error) (*Image, error) {
	s.kickPending()
	defer s.lockKey("image:" + name)()
	// Another fetch may have brought it meanwhile.
	if img, err := s.getLocal(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
		return img, err
	}
	var rec RemoteImage
	err := getRecord(ctx, r, remoteImageKey(name), &rec)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, fmt.Errorf("fetch image %q: %w", name, err)
	}
	img := rec.Image
	if err := checkRemoteImage(name, &rec); err != nil {
		return nil, err
	}
	for i := range rec.Layers {
		if err := s.fetchLayer(ctx, r, &rec.Layers[i]); err != nil {
			return nil, fmt.Errorf("fetch image %q: %w", name, err)
		}
	}
	wantID := img.ID
	if err := s.register(ctx, &img, nil); err != nil {
		return nil, fmt.Errorf("fetch image %q: %w", name, err)
	}
	if img.ID != wantID { // checked by checkRemoteImage: cannot happen
		return nil, errdefs.FailedPrecondition("image %q fetched from the object store has id %s, not %s", name, img.ID, wantID)
	}
	s.logger().Info("fetched image from the object store", "image", name, "layers", len(img.Layers))
	return &img, nil
}

// checkRemoteImage refuses a record that is not of name, that is not
// made of layers only, or whose layer records do not match its layers.
func checkRemoteImage(name string, rec *RemoteImage) error {
	img := &rec.Image
	bad := func(why string) error {
		return errdefs.FailedPrecondition("image %q in the object store is corrupt: %s; refusing to fetch it", name, why)
	}
	switch {
	case img.Name != name:
		return bad(fmt.Sprintf("its record names image %q", img.Name))
	case !shareable(img):
		return bad("it names host paths (rootfs or binds)")
	case len(img.Layers) != len(rec.Layers):
		return bad("its layer records do not match its layers")
	case img.ID != imageID(img):
		return bad("its id does not match its content")
	}
	for i, id := range img.Layers {
		if rl := rec.Layers[i]; !validLayerID(id) || rl.ID != id || !isHex64(rl.SHA256) || rl.TarSize < 0 {
			return bad(fmt.Sprintf("layer %d (%q) has a bad record", i, id))
		}
	}
	return nil
}

// fetchLayer downloads and commits layer rl.ID unless it is here. The tar
// is checked against rl.SHA256 and rl.TarSize while it is extracted into
// CommitLayer's temporary directory, which is dropped on a mismatch.
func (s *Store) fetchLayer(ctx context.Context, r Remote, rl *RemoteLayer) error {
	defer s.lockKey("layer:" + rl.ID)()
	if s.HasLayer(rl.ID) {
		return nil
	}
	rc, err := r.Get(ctx, remoteLayerTarKey(rl.ID, rl.SHA256))
	if err != nil {
		return fmt.Errorf("layer %s: %w", rl.ID, err)
	}
	defer rc.Close()
	h := sha256.New()
	l := &Layer{ID: rl.ID, Parent: rl.Parent, CreatedBy: rl.CreatedBy}
	return s.CommitLayer(ctx, l, func(tree string) error {
		cr := &countReader{r: io.TeeReader(rc, h)}
		xerr := extractLayerTar(ctx, cr, tree)
		if err := ctx.Err(); err != nil {
			return err
		}
		// The rest (the tar's padding, or whatever a bad tar holds) counts.
		_, cerr := io.Copy(io.Discard, cr)
		if cerr == nil {
			if err := checkSum(rl, h, cr.n); err != nil {
				return err // a mismatch explains any extraction error
			}
		}
		if xerr != nil {
			return fmt.Errorf("layer %s: extract: %w", rl.ID, xerr)
		}
		if cerr != nil {
			return fmt.Errorf("layer %s: download: %w", rl.ID, cerr)
		}
		return nil
	})
}

func checkSum(rl *RemoteLayer, h hash.Hash, n int64) error {
	if sum := hex.EncodeToString(h.Sum(nil)); sum != rl.SHA256 || n != rl.TarSize {
		return errdefs.FailedPrecondition("layer %s is corrupt: its tar in the object store (%d bytes, sha256 %s) does not match its record (%d bytes, sha256 %s); refusing it",
			rl.ID, n, sum, rl.TarSize, rl.SHA256)
	}
	return nil
}

// unpublish removes image name's record from the remote (Remove).
func (s *Store) unpublish(ctx context.Context, name string) error {
	r := s.remote()
	if r == nil || name == HostImage {
		return nil
	}
	// No image lock: the caller holds the store's lock, which a fetch
	// takes under its image lock.
	if err := r.Delete(ctx, remoteImageKey(name)); err != nil {
		return fmt.Errorf("remove image %q from the object store: %w", name, err)
	}
	s.clearPending(name, "")
	return nil
}

// remoteOnly returns image name's record from the remote, for Remove of an
// image this node has not fetched.
func (s *Store) remoteOnly(ctx context.Context, name string) (*Image, error) {
	r := s.remote()
	if r == nil || name == HostImage {
		return nil, errdefs.NotFound("image %q not found", name)
	}
	var rec RemoteImage
	err := getRecord(ctx, r, remoteImageKey(name), &rec)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("image %q not found", name)
	}
	if err != nil {
		return nil, err
	}
	img := rec.Image
	img.Name = name
	return &img, nil
}

// markPending records that image img is (being) uploaded.
func (s *Store) markPending(img *Image) error {
	dir := filepath.Join(s.dir, pendingDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(dir, img.Name), []byte(img.ID+"\n"), 0o600)
}

// clearPending drops image name's pending mark, if it is for id (any id
// when id is "").
func (s *Store) clearPending(name, id string) {
	p := filepath.Join(s.dir, pendingDir, name)
	if id != "" {
		data, err := os.ReadFile(p)
		if err != nil || string(data) != id+"\n" {
			return
		}
	}
	_ = os.Remove(p)
}

// RetryPending uploads the images whose upload failed or was cut short. A
// pending image that changed or went meanwhile is dropped from the list, and
// so is one that the bucket holds in a newer version from another node.
func (s *Store) RetryPending(ctx context.Context) error {
	r := s.remote()
	if r == nil {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, pendingDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pending image uploads: %w", err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		img, err := s.getLocal(ctx, name)
		if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument) {
			s.clearPending(name, "")
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var rec RemoteImage
		switch err := getRecord(ctx, r, remoteImageKey(name), &rec); {
		case err == nil && (rec.Image.ID == img.ID || rec.Image.CreatedAt.After(img.CreatedAt)):
			s.clearPending(name, img.ID) // uploaded, or superseded by a newer build elsewhere
			continue
		case err != nil && !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrFailedPrecondition):
			errs = append(errs, err)
			continue
		}
		if err := s.Publish(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// kickPending runs RetryPending in the background when uploads are pending
// and no retry is running.
func (s *Store) kickPending() {
	if s.remote() == nil {
		return
	}
	if entries, err := os.ReadDir(filepath.Join(s.dir, pendingDir)); err != nil || len(entries) == 0 {
		return
	}
	s.rem.mu.Lock()
	if s.rem.retrying {
		s.rem.mu.Unlock()
		return
	}
	s.rem.retrying = true
	s.rem.mu.Unlock()
	go func() {
		defer func() { s.rem.mu.Lock(); s.rem.retrying = false; s.rem.mu.Unlock() }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		if err := s.RetryPending(ctx); err != nil {
			s.logger().Warn("retry of pending image uploads failed; retried at the next start", "err", err)
		}
	}()
}

func isHex64(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == 64
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
