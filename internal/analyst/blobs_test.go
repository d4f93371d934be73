package analyst

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/forkbox/forkbox/internal/blob"
	"github.com/forkbox/forkbox/internal/blob/miniotest"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
)

// These tests run a real MinIO (make setup builds it) and a real SQLite
// store shared by two Services, as two nodes of a cluster share one
// PostgreSQL store and one bucket. They stop short of sandboxes: place
// opens whatever uploadFile returns.

const sampleCSV = "date,region,revenue\n2024-01-01,North,10.5\n2024-01-02,South,3\n"

func openStore(t *testing.T) store.Backend {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "forkbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openBucket(t *testing.T, prefix string) *blob.S3 {
	t.Helper()
	srv := miniotest.Start(t, "")
	b, err := blob.Open(srv.URLWithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newService(t *testing.T, st store.ConversationStore, b Blobs) (*Service, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := New(st, nil, Config{UploadsDir: dir, Blobs: b})
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// countingBlobs counts the calls that reach the bucket.
type countingBlobs struct {
	Blobs
	gets, puts, deletes atomic.Int64
	failPut             error
}

func (c *countingBlobs) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.gets.Add(1)
	return c.Blobs.Get(ctx, key)
}

func (c *countingBlobs) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	c.puts.Add(1)
	if c.failPut != nil {
		return c.failPut
	}
	return c.Blobs.Put(ctx, key, r, size)
}

func (c *countingBlobs) Delete(ctx context.Context, key string) error {
	c.deletes.Add(1)
	return c.Blobs.Delete(ctx, key)
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func readObject(t *testing.T, b Blobs, key string) []byte {
	t.Helper()
	rc, err := b.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestUploadUsableOnAnotherNode(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	bucket := openBucket(t, "cluster")
	a, dirA := newService(t, st, bucket)
	cb := &countingBlobs{Blobs: bucket}
	b, dirB := newService(t, st, cb)

	v, err := a.Upload(ctx, "sales.csv", strings.NewReader(sampleCSV), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := readObject(t, bucket, "uploads/"+v.ID+".csv"); string(got) != sampleCSV {
		t.Fatalf("object holds %q", got)
	}
	if got, err := os.ReadFile(filepath.Join(dirA, v.ID+".csv")); err != nil || string(got) != sampleCSV {
		t.Fatalf("node A's copy: %q %v", got, err)
	}
	u, err := st.GetUpload(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}

	// Node B has never seen the bytes: it fetches them, verified.
	path, err := b.uploadFile(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dirB, v.ID+".csv") {
		t.Fatalf("path %s not in node B's uploads dir %s", path, dirB)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != sampleCSV {
		t.Fatalf("node B's copy: %q %v", got, err)
	}
	if names := dirNames(t, dirB); len(names) != 1 {
		t.Fatalf("node B's uploads dir holds %v, want only the upload", names)
	}
	if n := cb.gets.Load(); n != 1 {
		t.Fatalf("%d downloads, want 1", n)
	}

	// Again: the verified local copy is used, the bucket is not asked.
	if _, err := b.uploadFile(ctx, u); err != nil {
		t.Fatal(err)
	}
	if n := cb.gets.Load(); n != 1 {
		t.Fatalf("%d downloads after a second use, want 1", n)
	}

	// A local copy that is not the record's is replaced by the object.
	if err := os.WriteFile(path, []byte("date,region,revenue\nbad,bad,0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.uploadFile(ctx, u); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != sampleCSV {
		t.Fatalf("damaged local copy not replaced: %q", got)
	}
	if n := cb.gets.Load(); n != 2 {
		t.Fatalf("%d downloads, want 2", n)
	}

	// Several questions on a fresh node fetch at once: each gets the bytes,
	// and one file is left.
	c, dirC := newService(t, st, bucket)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			p, err := c.uploadFile(ctx, u)
			if err == nil {
				var got []byte
				if got, err = os.ReadFile(p); err == nil && string(got) != sampleCSV {
					err = errors.New("wrong bytes")
				}
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if names := dirNames(t, dirC); len(names) != 1 {
		t.Fatalf("concurrent fetches left %v", names)
	}

	// Node A uses its own copy.
	if p, err := a.uploadFile(ctx, u); err != nil || p != filepath.Join(dirA, v.ID+".csv") {
		t.Fatalf("node A: %s %v", p, err)
	}
}

func TestTamperedObjectRefused(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	bucket := openBucket(t, "")
	a, _ := newService(t, st, bucket)
	b, dirB := newService(t, st, bucket)

	v, err := a.Upload(ctx, "sales.csv", strings.NewReader(sampleCSV), "")
	if err != nil {
		t.Fatal(err)
	}
	u, err := st.GetUpload(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"same size":  strings.Replace(sampleCSV, "10.5", "99.5", 1),
		"longer":     sampleCSV + "2024-01-03,West,1\n",
		"shorter":    sampleCSV[:len(sampleCSV)-2],
		"empty file": "",
	} {
		t.Run(name, func(t *testing.T) {
			if err := bucket.Put(ctx, "uploads/"+v.ID+".csv", strings.NewReader(body), int64(len(body))); err != nil {
				t.Fatal(err)
			}
			_, err := b.uploadFile(ctx, u)
			if !errors.Is(err, errIntegrity) || !strings.Contains(err.Error(), "SHA-256") || !strings.Contains(err.Error(), v.ID) {
				t.Fatalf("tampered object: %v", err)
			}
			if names := dirNames(t, dirB); len(names) != 0 {
				t.Fatalf("refused download left %v", names)
			}
		})
	}

	// A missing object is an error naming the upload, and leaves nothing.
	if err := bucket.Delete(ctx, "uploads/"+v.ID+".csv"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.uploadFile(ctx, u); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), v.ID) {
		t.Fatalf("missing object: %v", err)
	}
	if names := dirNames(t, dirB); len(names) != 0 {
		t.Fatalf("failed download left %v", names)
	}
}

// failingStore refuses to record uploads.
type failingStore struct{ store.ConversationStore }

var errStoreDown = errors.New("store down")

func (failingStore) CreateUpload(context.Context, *store.Upload) error { return errStoreDown }

func TestFailedUploadKeepsNothing(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	bucket := openBucket(t, "")

	// The bucket refuses the bytes: no record, no file, a clear error.
	putErr := errors.New("bucket unreachable")
	cb := &countingBlobs{Blobs: bucket, failPut: putErr}
	a, dirA := newService(t, st, cb)
	_, err := a.Upload(ctx, "sales.csv", strings.NewReader(sampleCSV), "")
	if !errors.Is(err, putErr) || !strings.Contains(err.Error(), "object storage") {
		t.Fatalf("upload with a failing bucket: %v", err)
	}
	if ups, err := st.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
		t.Fatalf("records after a failed upload: %v %v", ups, err)
	}
	if names := dirNames(t, dirA); len(names) != 0 {
		t.Fatalf("failed upload left %v", names)
	}

	// The store refuses the record: the object goes too.
	c, dirC := newService(t, failingStore{st}, bucket)
	if _, err := c.Upload(ctx, "sales.csv", strings.NewReader(sampleCSV), ""); !errors.Is(err, errStoreDown) {
		t.Fatalf("upload with a failing store: %v", err)
	}
	if objs, err := bucket.List(ctx, ""); err != nil || len(objs) != 0 {
		t.Fatalf("objects after a failed upload: %v %v", objs, err)
	}
	if names := dirNames(t, dirC); len(names) != 0 {
		t.Fatalf("failed upload left %v", names)
	}

	// A refused CSV never reaches the bucket.
	cb2 := &countingBlobs{Blobs: bucket}
	d, _ := newService(t, st, cb2)
	if _, err := d.Upload(ctx, "x.csv", bytes.NewReader([]byte{0, 1, 2}), ""); err == nil {
		t.Fatal("binary accepted")
	}
	if cb2.puts.Load() != 0 {
		t.Fatal("a refused upload was put in the bucket")
	}
}

func TestWithoutBlobsNothingTouchesTheBucket(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	bucket := openBucket(t, "")
	// A nil *blob.S3 (a daemon without --blobs) is no bucket at all.
	a, dirA := newService(t, st, (*blob.S3)(nil))
	if a.cfg.Blobs != nil {
		t.Fatal("a nil *blob.S3 was kept as a bucket")
	}
	v, err := a.Upload(ctx, "sales.csv", strings.NewReader(sampleCSV), "")
	if err != nil {
		t.Fatal(err)
	}
	u, err := st.GetUpload(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	path, err := a.uploadFile(ctx, u)
	if err != nil || path != filepath.Join(dirA, v.ID+".csv") {
		t.Fatalf("%s %v", path, err)
	}
	if got, _ := os.ReadFile(path); string(got) != sampleCSV {
		t.Fatalf("local copy %q", got)
	}
	// Another node without a bucket has no copy: it names its own path,
	// which place then fails to open, as before.
	b, dirB := newService(t, st, nil)
	if path, err := b.uploadFile(ctx, u); err != nil || path != filepath.Join(dirB, v.ID+".csv") {
		t.Fatalf("%s %v", path, err)
	}
	if names := dirNames(t, dirB); len(names) != 0 {
		t.Fatalf("node B's uploads dir holds %v", names)
	}
	if objs, err := bucket.List(ctx, ""); err != nil || len(objs) != 0 {
		t.Fatalf("objects without Blobs: %v %v", objs, err)
	}
}
