package analyst

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/diskspace/diskspacetest"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// TestUploadOnAFullDisk: an upload whose size is known and does not fit is
// refused before it is read; one that fills the disk while it is written
// is 507 too, naming the uploads dir's filesystem; neither leaves a file
// or a record.
func TestUploadOnAFullDisk(t *testing.T) {
	ctx := context.Background()
	fsDir := diskspacetest.TmpFS(t, 1<<20)
	st := openStore(t)
	dir := filepath.Join(fsDir, "uploads")
	s, err := New(st, nil, Config{UploadsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	body := "n\n" + strings.Repeat("12345678\n", 300_000) // 2.6 MiB

	err = s.CheckRoom(int64(len(body)))
	var e *diskspace.Error
	if !errors.As(err, &e) || e.Midway || e.Room.Path != dir || e.Room.Mount != fsDir ||
		!strings.Contains(err.Error(), "not enough disk space for an upload: it needs about 2.6 MiB, and the filesystem at "+fsDir+" (tmpfs), which holds "+dir+", has ") {
		t.Fatalf("check: %v", err)
	}

	_, err = s.Upload(ctx, "big.csv", strings.NewReader(body), "")
	if !errors.As(err, &e) || !e.Midway || !e.AtLeast || !errors.Is(err, errdefs.ErrInsufficientStorage) ||
		!strings.Contains(err.Error(), `the disk filled up while writing the upload "big.csv": it needs more than `) {
		t.Fatalf("upload: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left in the uploads dir: %v", ents)
	}
	if list, err := st.ListUploads(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("upload records: %v %v", list, err)
	}
	// A small one still fits.
	if _, err := s.Upload(ctx, "small.csv", strings.NewReader(sampleCSV), ""); err != nil {
		t.Fatalf("small upload: %v", err)
	}
}
