package criu

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
)

// A CRIU that dies without answering while a helper it forked keeps its
// end of the socket open (its usernsd, a half-restored task) must not hang
// the conversation: the caller learns it at once. (A resume held its
// sandbox for minutes when that happened.)
func TestSwrkCRIUDiesHelperKeepsSocket(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "criu")
	// The helper inherits fd 3 and outlives the main process.
	script := "#!/bin/sh\n(sleep 30) &\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h := &Host{Path: fake}
	sw, err := h.StartSwrk(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := sw.Do(rpc.CriuReqType_RESTORE, &rpc.CriuOpts{ImagesDirFd: new(int32)}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "exited without an answer") {
			t.Fatalf("Do after CRIU died: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do hangs after CRIU died while a helper holds its socket")
	}
	if err := sw.Close(); err == nil {
		t.Fatal("Close: CRIU exited 1, no error")
	}
}

// The context ends a conversation CRIU never answers.
func TestSwrkContextEndsWait(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "criu")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	sw, err := (&Host{Path: fake}).StartSwrk(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := sw.Do(rpc.CriuReqType_DUMP, &rpc.CriuOpts{ImagesDirFd: new(int32)}, nil); err == nil {
		t.Fatal("Do answered without CRIU")
	}
	sw.Close()
	if time.Since(start) > 10*time.Second {
		t.Fatalf("the context did not end the wait: %s", time.Since(start))
	}
}
