package blob_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/internal/blob"
	"github.com/forkbox/forkbox/internal/blob/miniotest"
	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestOpenBadURLsKeepSecrets(t *testing.T) {
	for _, u := range []string{
		"http://KEY:SUPERSECRET@bucket/p",
		"s3://KEY:SUPERSECRET@/p",
		"s3://KEY:SUPERSECRET@bucket/p?secure=maybe",
		"s3://KEY:SUPERSECRET@bucket/p?endpont=x",
		"s3://KEY:@bucket/p",
		"s3://KEY:SUPERSECRET@bucket/%zz",
	} {
		_, err := blob.Open(u)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Open(%q): %v, want invalid argument", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "SUPERSECRET") {
			t.Errorf("Open(%q): the error shows the secret: %v", u, err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	srv := miniotest.Start(t, "")
	s, err := blob.Open(srv.URLWithPrefix("some/prefix"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.Redacted(), srv.SecretKey) || strings.Contains(s.Redacted(), srv.AccessKey) {
		t.Fatalf("Redacted() shows credentials: %s", s.Redacted())
	}
	ctx := context.Background()

	small := []byte("hello, object storage")
	if err := s.Put(ctx, "a/small", bytes.NewReader(small), int64(len(small))); err != nil {
		t.Fatal(err)
	}
	// More than two parts, not a multiple of the part size.
	big := make([]byte, 2*blob.PartSize+12345)
	rng := rand.NewChaCha8([32]byte{1})
	rng.Read(big)
	start := time.Now()
	if err := s.Put(ctx, "b/big", bytes.NewReader(big), int64(len(big))); err != nil {
		t.Fatal(err)
	}
	t.Logf("multipart put of %d bytes: %v", len(big), time.Since(start))
	for key, want := range map[string][]byte{"a/small": small, "b/big": big} {
		rc, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got) != sha256.Sum256(want) {
			t.Fatalf("%s: got %d bytes, not the %d put", key, len(got), len(want))
		}
		size, mod, err := s.Stat(ctx, key)
		if err != nil || size != int64(len(want)) || time.Since(mod) > time.Minute {
			t.Fatalf("stat %s: %d %v %v", key, size, mod, err)
		}
	}

	// Listing: keys relative to the prefix, in order, with sizes.
	objs, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Key != "a/small" || objs[0].Size != int64(len(small)) || objs[1].Key != "b/big" || objs[1].Size != int64(len(big)) {
		t.Fatalf("list: %+v", objs)
	}
	if objs, err := s.List(ctx, "b/"); err != nil || len(objs) != 1 || objs[0].Key != "b/big" {
		t.Fatalf("list b/: %+v %v", objs, err)
	}
	// The prefix is where the keys are: another prefix sees none of them.
	other, err := blob.Open(srv.URLWithPrefix("other"))
	if err != nil {
		t.Fatal(err)
	}
	if objs, err := other.List(ctx, ""); err != nil || len(objs) != 0 {
		t.Fatalf("list of another prefix: %+v %v", objs, err)
	}

	// Touch makes an object young again, keeping its bytes.
	_, before, _ := s.Stat(ctx, "a/small")
	time.Sleep(1100 * time.Millisecond) // S3 times are in seconds
	if err := s.Touch(ctx, "a/small"); err != nil {
		t.Fatal(err)
	}
	if size, after, err := s.Stat(ctx, "a/small"); err != nil || size != int64(len(small)) || !after.After(before) {
		t.Fatalf("touch: %d %v (before %v) %v", size, after, before, err)
	}

	if err := s.Delete(ctx, "a/small"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a/small"); err != nil {
		t.Fatalf("delete of a missing object: %v", err)
	}
	if objs, _ := s.List(ctx, ""); len(objs) != 1 {
		t.Fatalf("after delete: %+v", objs)
	}
}

func TestNotFound(t *testing.T) {
	srv := miniotest.Start(t, "")
	s, err := blob.Open(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _, err = s.Stat(ctx, "missing")
	var nf *blob.NotFoundError
	if !errors.Is(err, errdefs.ErrNotFound) || !errors.As(err, &nf) || nf.Key != "missing" {
		t.Fatalf("stat of a missing object: %v", err)
	}
	if _, err := s.Get(ctx, "missing/too"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get of a missing object: %v", err)
	}
	if err := s.Touch(ctx, "missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("touch of a missing object: %v", err)
	}
}

func TestOpenChecksBucketAndKeepsSecrets(t *testing.T) {
	srv := miniotest.Start(t, "")
	u, _ := url.Parse(srv.URL)
	u.Host = "no-such-bucket"
	_, err := blob.Open(u.String())
	if err == nil || !strings.Contains(err.Error(), "no-such-bucket") || !strings.Contains(err.Error(), srv.Endpoint) {
		t.Fatalf("open of a missing bucket: %v", err)
	}
	if strings.Contains(err.Error(), srv.SecretKey) {
		t.Fatalf("error shows the secret: %v", err)
	}
	// Wrong credentials: an error, without them.
	u, _ = url.Parse(srv.URL)
	u.User = url.UserPassword(srv.AccessKey, "wrong-SUPERSECRET")
	_, err = blob.Open(u.String())
	if err == nil || strings.Contains(err.Error(), "SUPERSECRET") {
		t.Fatalf("open with a wrong secret: %v", err)
	}
	// Credentials from the environment when the URL has none.
	u, _ = url.Parse(srv.URL)
	u.User = nil
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	s, err := blob.Open(u.String())
	if err != nil {
		t.Fatalf("open with credentials from the environment: %v", err)
	}
	if err := s.Put(context.Background(), "k", strings.NewReader("v"), 1); err != nil {
		t.Fatal(err)
	}
}
