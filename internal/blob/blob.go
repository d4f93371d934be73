// Package blob stores objects in S3-compatible object storage (AWS S3,
// MinIO, ...) through minio-go: the remote half of forkbox's snapshot
// store, so that any node of a cluster can restore a snapshot another
// node took.
//
// A store is named by a URL:
//
//	s3://[KEY:SECRET@]bucket[/prefix][?endpoint=host:port][&secure=false][&region=us-east-1]
//
// Credentials come from the URL's userinfo, else from the standard AWS
// environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN); the region from the URL, else AWS_REGION. The
// endpoint defaults to s3.amazonaws.com, with TLS unless secure=false.
// Every key is relative to the URL's prefix. Secrets never appear in an
// error: log the store as Redacted().
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// PartSize is the size of the parts of a multipart upload. minio-go
// uploads an object larger than this in parts of this size (S3 allows
// 10,000 parts, so up to ~156 GiB); each part is buffered in memory.
const PartSize = 16 << 20

// openTimeout bounds the bucket check of Open.
const openTimeout = 30 * time.Second

// S3 is a bucket (and a key prefix in it) of an S3-compatible store.
type S3 struct {
	c        *minio.Client
	bucket   string
	prefix   string // "" or ends with "/"
	endpoint string
	redacted string
}

// Object is one listed object: its key (relative to the store's prefix),
// size and last modification.
type Object struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// NotFoundError is the error of an operation on a missing object. It is
// errdefs.ErrNotFound (errors.Is).
type NotFoundError struct {
	Bucket, Key string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("object %s not found in bucket %s", e.Key, e.Bucket)
}

// Is makes a NotFoundError an errdefs.ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == errdefs.ErrNotFound }

// Config is a parsed store URL.
type config struct {
	bucket, prefix string
	endpoint       string
	secure         bool
	region         string
	key, secret    string
	fromURL        bool // credentials in the URL
}

func parse(rawURL string) (*config, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url's error quotes the URL, which may hold a secret.
		return nil, "", errdefs.InvalidArgument("object store URL is not a URL")
	}
	if u.Scheme != "s3" {
		return nil, "", errdefs.InvalidArgument("object store URL %s: scheme must be s3", redact(u))
	}
	c := &config{bucket: u.Host, endpoint: "s3.amazonaws.com", secure: true}
	if c.bucket == "" {
		return nil, "", errdefs.InvalidArgument("object store URL %s names no bucket", redact(u))
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		c.prefix = p + "/"
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "secure", "region":
		default:
			return nil, "", errdefs.InvalidArgument("object store URL %s: unknown parameter %q (want endpoint, secure, region)", redact(u), k)
		}
	}
	if e := q.Get("endpoint"); e != "" {
		c.endpoint = e
	}
	if s := q.Get("secure"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, "", errdefs.InvalidArgument("object store URL %s: secure=%q is not a boolean", redact(u), s)
		}
		c.secure = b
	}
	c.region = q.Get("region")
	if c.region == "" {
		c.region = os.Getenv("AWS_REGION")
	}
	if u.User != nil {
		c.key = u.User.Username()
		c.secret, _ = u.User.Password()
		c.fromURL = true
		if c.key == "" || c.secret == "" {
			return nil, "", errdefs.InvalidArgument("object store URL %s: credentials must be KEY:SECRET", redact(u))
		}
	}
	return c, redact(u), nil
}

// redact is the URL without its credentials.
func redact(u *url.URL) string {
	r := *u
	if r.User != nil {
		r.User = url.User("REDACTED")
	}
	return r.String()
}

// Open connects to the store named by rawURL and checks that its bucket
// exists.
func Open(rawURL string) (*S3, error) {
	c, red, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	creds := credentials.NewEnvAWS()
	if c.fromURL {
		creds = credentials.NewStaticV4(c.key, c.secret, "")
	}
	cl, err := minio.New(c.endpoint, &minio.Options{Creds: creds, Secure: c.secure, Region: c.region})
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", red, err)
	}
	s := &S3{c: cl, bucket: c.bucket, prefix: c.prefix, endpoint: c.endpoint, redacted: red}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	ok, err := cl.BucketExists(ctx, c.bucket)
	if err != nil {
		return nil, fmt.Errorf("object store: check bucket %s at %s: %w", c.bucket, c.endpoint, err)
	}
	if !ok {
		return nil, errdefs.FailedPrecondition("object store: bucket %s does not exist at %s", c.bucket, c.endpoint)
	}
	return s, nil
}

// Redacted is the store's URL without credentials, for logs.
func (s *S3) Redacted() string { return s.redacted }

// String is Redacted, so a store printed by mistake leaks nothing.
func (s *S3) String() string { return s.redacted }

// Bucket is the store's bucket.
func (s *S3) Bucket() string { return s.bucket }

func (s *S3) key(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") {
		return "", errdefs.InvalidArgument("bad object key %q", key)
	}
	return s.prefix + key, nil
}

func isNotFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == "NoSuchKey" || r.StatusCode == http.StatusNotFound && r.Code != "NoSuchBucket"
}

func (s *S3) wrap(op, key string, err error) error {
	if isNotFound(err) {
		return &NotFoundError{Bucket: s.bucket, Key: key}
	}
	return fmt.Errorf("object store: %s %s in bucket %s: %w", op, key, s.bucket, err)
}

// Put stores size bytes of r as key (size -1: unknown, read to EOF),
// replacing any object there. Objects larger than PartSize go up in parts.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	_, err = s.c.PutObject(ctx, s.bucket, k, r, size, minio.PutObjectOptions{
		PartSize:    PartSize,
		ContentType: "application/octet-stream",
	})
	if err != nil {
		return s.wrap("put", key, err)
	}
	return nil
}

// Get opens the object at key. A missing one is a *NotFoundError.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	k, err := s.key(key)
	if err != nil {
		return nil, err
	}
	o, err := s.c.GetObject(ctx, s.bucket, k, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.wrap("get", key, err)
	}
	// The request is made lazily; Stat makes it, so a missing object is
	// an error here rather than at the first Read.
	if _, err := o.Stat(); err != nil {
		o.Close()
		return nil, s.wrap("get", key, err)
	}
	return o, nil
}

// Stat is the size and last modification of the object at key. A missing
// one is a *NotFoundError.
func (s *S3) Stat(ctx context.Context, key string) (size int64, modTime time.Time, err error) {
	k, err := s.key(key)
	if err != nil {
		return 0, time.Time{}, err
	}
	info, err := s.c.StatObject(ctx, s.bucket, k, minio.StatObjectOptions{})
	if err != nil {
		return 0, time.Time{}, s.wrap("stat", key, err)
	}
	return info.Size, info.LastModified, nil
}

// Touch makes the object at key modified now without sending its bytes
// again (a server-side copy onto itself), so a collector that spares young
// objects spares it. S3 copies objects up to 5 GiB this way; the caller
// uploads larger ones again.
func (s *S3) Touch(ctx context.Context, key string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	_, err = s.c.CopyObject(ctx,
		minio.CopyDestOptions{Bucket: s.bucket, Object: k, ReplaceMetadata: true,
			UserMetadata: map[string]string{"Forkbox-Touched": time.Now().UTC().Format(time.RFC3339Nano)}},
		minio.CopySrcOptions{Bucket: s.bucket, Object: k})
	if err != nil {
		return s.wrap("touch", key, err)
	}
	return nil
}

// Delete removes the object at key; a missing one is no error.
func (s *S3) Delete(ctx context.Context, key string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, k, minio.RemoveObjectOptions{}); err != nil && !isNotFound(err) {
		return s.wrap("delete", key, err)
	}
	return nil
}

// List is every object whose key starts with prefix, in key order.
func (s *S3) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if o.Err != nil {
			if errors.Is(o.Err, context.Canceled) || errors.Is(o.Err, context.DeadlineExceeded) {
				return nil, o.Err
			}
			return nil, fmt.Errorf("object store: list %s in bucket %s: %w", prefix, s.bucket, o.Err)
		}
		out = append(out, Object{Key: strings.TrimPrefix(o.Key, s.prefix), Size: o.Size, ModTime: o.LastModified})
	}
	return out, nil
}
