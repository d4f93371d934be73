package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/images"
	"github.com/forkbox/forkbox/internal/build"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/netsetup"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/sandbox"
	"github.com/forkbox/forkbox/internal/userns"
)

// ensureDefaultImage builds the default image from its embedded recipe. When
// every layer is cached (the usual start) this takes milliseconds and changes
// nothing; a changed recipe rebuilds what changed.
func ensureDefaultImage(ctx context.Context, b *build.Builder, mgr *sandbox.Manager, log *slog.Logger) (img *api.Image, err error) {
	r, err := build.ParseRecipe(images.Python)
	if err != nil {
		return nil, fmt.Errorf("embedded recipe: %w", err)
	}
	start := time.Now()
	built := false
	track := mgr.TrackImageBuild(r.Name)
	defer func() { track.Done(err) }()
	img, err = mgr.BuildImage(ctx, r, nil, func(ev api.BuildEvent) {
		if ev.Type == api.BuildEventStep {
			track.Step(ev.Step, ev.Total)
		}
		switch {
		case ev.Type == api.BuildEventStep && !ev.Cached && (ev.Kind == "run" || ev.Kind == "base" || ev.Kind == "copy"):
			built = true
			log.Info("building the default image", "image", r.Name, "step", ev.Step, "of", ev.Total, "kind", ev.Kind)
		case ev.Type == api.BuildEventLog:
			log.Debug("default image build", "image", r.Name, "step", ev.Step, "line", ev.Line)
		}
	})
	if err != nil {
		return nil, err
	}
	if built {
		log.Info("default image built", "image", img.Name, "layers", len(img.Layers), "size_bytes", img.SizeBytes, "took", time.Since(start).Round(time.Millisecond))
	}
	return img, nil
}

// Prepare builds the images a daemon needs (the default image from its
// recipe and the host-derived image) into cfg's images directory without
// starting a daemon, sending the build log to emit. `make run` and `make test`
// run it (forkbox prepare), so that no daemon waits minutes for its first
// image.
func Prepare(ctx context.Context, cfg Config, emit func(api.BuildEvent)) (_ *image.Image, err error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("--data-dir is empty")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Binary, err = SandboxBinary(cfg.Binary); err != nil {
		return nil, err
	}
	store, err := image.Open(cfg.imagesDir())
	if err != nil {
		return nil, err
	}
	if _, err := store.EnsureHostPython(ctx); err != nil {
		log.Warn("host image unavailable", "image", image.HostImage, "err", err)
	}
	nm, err := netsetup.New(ctx, netsetup.Config{DNSUpstreams: cfg.DNSUpstreams, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	// Build sandboxes of prepare live in a directory of their own, not in
	// the daemon's sandboxes dir, whose reconcile removes what it does not
	// know. One prepare at a time (flock); it removes what an interrupted
	// one left.
	dir := filepath.Join(cfg.DataDir, "prepare")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(cfg.DataDir, "prepare.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("prepare lock: %w", err)
	}
	first, count := cfg.UsernsFirst, cfg.UsernsCount
	if first == 0 {
		first = userns.DefaultFirst
	}
	if count == 0 {
		count = userns.DefaultCount
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	ids, err := userns.New(first, count, userns.DefaultClaimDir, absDir)
	if err != nil {
		return nil, err
	}
	// Nothing of a prepare outlives it: its ranges go back at the end.
	defer ids.Sweep(nil)
	rt, err := runtime.New(runtime.Config{
		Dir:      dir,
		CacheDir: filepath.Join(cfg.DataDir, "cache"),
		Binary:   cfg.Binary,
		Net:      nm,
		IDs:      ids,
		Logger:   log,
	})
	if err != nil {
		return nil, err
	}
	if left, err := rt.SandboxDirs(); err == nil {
		for _, id := range left {
			if err := rt.Destroy(ctx, id, &runtime.Info{}); err != nil {
				log.Warn("remove a build sandbox an interrupted prepare left", "sandbox", id, "err", err)
			}
		}
	}
	defer func() {
		rt.Close()
		if err := rt.ReleaseMounts(); err != nil {
			log.Warn("release sandboxes mount", "err", err)
		}
	}()
	r, err := build.ParseRecipe(images.Python)
	if err != nil {
		return nil, fmt.Errorf("embedded recipe: %w", err)
	}
	b := build.New(store, rt, build.Config{Logger: log, Limits: sandbox.ClampToHost(build.DefaultLimits)})
	return b.Build(ctx, r, nil, nil, emit)
}
