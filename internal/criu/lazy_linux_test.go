package criu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeLazyPages writes a shell script that stands in for criu lazy-pages.
func fakeLazyPages(t *testing.T, script string) *Host {
	t.Helper()
	fake := filepath.Join(t.TempDir(), "criu")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Host{Path: fake}
}

func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// The real CRIU refuses a directory without a dump: StartLazyPages says so
// with CRIU's words and leaves no process behind.
func TestLazyPagesRefusesNoImages(t *testing.T) {
	realHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), criuTimeout)
	defer cancel()
	h, err := Check(ctx)
	if err != nil || !h.LazyPages {
		t.Fatalf("Check: %v; lazy restores: %q (TestCheck says why they must work here)", err, h.LazyProblem)
	}
	work := t.TempDir()
	l, err := h.StartLazyPages(ctx, t.TempDir(), work)
	if err == nil {
		l.Kill()
		t.Fatal("criu lazy-pages started without images")
	}
	t.Logf("refused: %v", err)
	if !strings.Contains(err.Error(), "did not start") {
		t.Fatalf("error %q does not say what failed", err)
	}
	if _, err := os.Stat(filepath.Join(work, lazyLog)); err != nil {
		t.Fatalf("no log of the failure in the work dir: %v", err)
	}
}

// A lazy-pages process that stops before every page is in fails Wait
// with its log's error; one that never finishes is killed when the
// context ends; a successful one waits for its exit.
func TestLazyPagesWait(t *testing.T) {
	ctx := context.Background()
	work := t.TempDir()

	// Ready, then fails: the error carries the log's message.
	h := fakeLazyPages(t, `printf x >&3; exec 3>&-; echo "Error (criu/uffd.c:1): uffd: 1-8: failed reading pages" > `+filepath.Join(work, lazyLog)+`; exit 1`)
	l, err := h.StartLazyPages(ctx, t.TempDir(), work)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(ctx); err == nil || !strings.Contains(err.Error(), "failed reading pages") {
		t.Fatalf("Wait after a failed transfer: %v", err)
	}

	// Exits without saying it is ready: StartLazyPages fails at once.
	h = fakeLazyPages(t, `exit 1`)
	if _, err := h.StartLazyPages(ctx, t.TempDir(), t.TempDir()); err == nil {
		t.Fatal("StartLazyPages succeeded for a process that exited")
	}

	// Ready, then hangs: Wait ends with the context and kills it.
	h = fakeLazyPages(t, `printf x >&3; exec 3>&-; exec sleep 60`)
	l, err = h.StartLazyPages(ctx, t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := l.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its context: %v", err)
	}
	if !gone(l.Pid()) {
		t.Fatal("the process outlived Wait's context")
	}

	// Ready, then done.
	h = fakeLazyPages(t, `printf x >&3; exec 3>&-; sleep 0.1; exit 0`)
	l, err = h.StartLazyPages(ctx, t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatalf("Wait for a finished transfer: %v", err)
	}
	if err := l.Kill(); err != nil {
		t.Fatalf("Kill after exit: %v", err)
	}
}
