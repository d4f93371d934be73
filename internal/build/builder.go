package build

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/agent/client"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/diskspace"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/units"
)

// Runtime is what the builder needs from the isolation layer.
type Runtime interface {
	Create(ctx context.Context, spec runtime.Spec) (*runtime.Info, error)
	Destroy(ctx context.Context, id string, info *runtime.Info) error
	CaptureLayer(ctx context.Context, id, dst string) error
}

// Config tunes a Builder. Zero fields take the defaults.
type Config struct {
	// Limits and DiskMB size each build sandbox.
	Limits runtime.Limits
	DiskMB int64
	// Parallel bounds how many builds run at once (default 2).
	Parallel int
	// Mirror is the Debian mirror for debian: bases without their own
	// (default: the host's, from /etc/apt).
	Mirror string
	// TempDir holds build contexts while a build runs (default: the
	// image store's directory).
	TempDir string
	Logger  *slog.Logger
}

// DefaultLimits are a build sandbox's limits when Config sets none (the
// daemon lowers them to the host's bounds: sandbox.ClampToHost).
var DefaultLimits = runtime.Limits{CPUs: 2, MemoryMB: 4096, PIDs: 4096}

// Builder builds recipes into images and imports OCI archives. It is safe
// for concurrent use.
type Builder struct {
	images *image.Store
	rt     Runtime
	cfg    Config
	sem    chan struct{}
	log    *slog.Logger

	mirrorOnce sync.Once
	mirror     string
}

// New returns a Builder storing images in images and running build steps in
// sandboxes of rt.
func New(images *image.Store, rt Runtime, cfg Config) *Builder {
	if cfg.Limits.CPUs == 0 {
		cfg.Limits.CPUs = DefaultLimits.CPUs
	}
	if cfg.Limits.MemoryMB == 0 {
		cfg.Limits.MemoryMB = DefaultLimits.MemoryMB
	}
	if cfg.Limits.PIDs == 0 {
		cfg.Limits.PIDs = DefaultLimits.PIDs
	}
	if cfg.DiskMB == 0 {
		cfg.DiskMB = 16384
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 2
	}
	if cfg.TempDir == "" {
		cfg.TempDir = images.Dir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Builder{images: images, rt: rt, cfg: cfg, sem: make(chan struct{}, cfg.Parallel), log: cfg.Logger}
}

// state is the image being built: its layers and defaults so far, and the
// chain digest that names the next layer.
type state struct {
	chain  string
	parent string // top layer id ("" for none)
	img    image.Image
	copies *image.Budget // what copy steps copied so far
}

// Build builds r and registers it. buildContext, when not nil, is a tar (or
// gzipped tar) of the files its copy steps use. emit receives the build log.
// A failing step ends the build with an error carrying the step's output,
// and nothing is registered; the layers of the steps before it stay cached.
func (b *Builder) Build(ctx context.Context, r *api.Recipe, buildContext io.Reader, replace func(old *image.Image) error, emit func(api.BuildEvent)) (*image.Image, error) {
	if emit == nil {
		emit = func(api.BuildEvent) {}
	}
	if err := Validate(r); err != nil {
		return nil, err
	}
	select {
	case b.sem <- struct{}{}:
		defer func() { <-b.sem }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	total := len(r.Steps)
	var contextDir string
	if buildContext != nil {
		dir, err := os.MkdirTemp(b.cfg.TempDir, image.TempPrefix()+"context-")
		if err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
		defer os.RemoveAll(dir)
		// Bounded expanded and in files, as an image's layers are (the
		// context as sent is the caller's to bound: the API bounds the
		// upload).
		opts := image.ExtractOptions{Budget: image.NewBudget(b.images.Bounds(), "build context")}
		if err := image.ExtractTar(ctx, buildContext, dir, opts); err != nil {
			if errors.Is(err, errdefs.ErrTooLarge) {
				return nil, err // names the bound
			}
			if diskspace.IsFull(err) {
				_, written, _ := treeCount(dir)
				return nil, diskspace.Full(b.cfg.TempDir, "the build context", written, true, err)
			}
			return nil, fmt.Errorf("build context: %w", err)
		}
		contextDir = dir
	}
	st, err := b.base(ctx, r, total, emit)
	if err != nil {
		return nil, err
	}
	// Copy steps copy from the context, each as often as the recipe says:
	// together they are bounded as the context is.
	st.copies = image.NewBudget(b.images.Bounds(), "copy steps (together)")
	for i, step := range r.Steps {
		if err := b.step(ctx, st, i+1, total, step, contextDir, emit); err != nil {
			return nil, err
		}
	}
	img := st.img
	img.Name = r.Name
	img.Base = r.Base
	img.Recipe = "recipe/" + st.chain[:16]
	img.CreatedAt = timeNow()
	if err := b.images.Register(ctx, &img, replace); err != nil {
		return nil, err
	}
	emit(api.BuildEvent{Type: api.BuildEventLog, Step: total, Total: total,
		Line: fmt.Sprintf("image %s registered: %d layers, %s", img.Name, len(img.Layers), units.Bytes(img.SizeBytes))})
	return &img, nil
}

// Import imports an OCI image archive (docker save, or an OCI layout as a
// tar) as image name.
func (b *Builder) Import(ctx context.Context, name string, archive io.Reader, replace func(old *image.Image) error, emit func(api.BuildEvent)) (*image.Image, error) {
	if emit == nil {
		emit = func(api.BuildEvent) {}
	}
	emit(api.BuildEvent{Type: api.BuildEventStep, Kind: "import", Detail: name})
	return b.images.Import(ctx, name, archive, replace, func(format string, args ...any) {
		emit(api.BuildEvent{Type: api.BuildEventLog, Line: fmt.Sprintf(format, args...)})
	})
}

// base resolves the recipe's base into the starting state.
func (b *Builder) base(ctx context.Context, r *api.Recipe, total int, emit func(api.BuildEvent)) (*state, error) {
	if suite, ok := strings.CutPrefix(r.Base, "debian:"); ok {
		return b.debianBase(ctx, suite, r.Mirror, total, emit)
	}
	if r.Mirror != "" {
		return nil, errdefs.InvalidArgument("recipe: mirror applies only to a debian:<suite> base")
	}
	base, err := b.images.Get(ctx, r.Base)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("base image %q not found (use debian:<suite> or an image name; see GET /v1/images)", r.Base)
	}
	if err != nil {
		return nil, err
	}
	emit(api.BuildEvent{Type: api.BuildEventStep, Step: 0, Total: total, Kind: "base", Detail: r.Base, Cached: true})
	st := &state{chain: image.ChainID("", "image:"+base.ID), img: *base}
	st.img.Layers = slices.Clone(base.Layers)
	st.img.Binds = slices.Clone(base.Binds)
	st.img.Env = slices.Clone(base.Env)
	st.img.LowerDirs = nil
	if n := len(base.Layers); n > 0 {
		st.parent = base.Layers[n-1]
	}
	return st, nil
}

// baseEnv is the environment of an image bootstrapped from Debian.
var baseEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LANG=C.UTF-8",
}

// step runs one recipe step on st.
func (b *Builder) step(ctx context.Context, st *state, n, total int, step api.RecipeStep, contextDir string, emit func(api.BuildEvent)) error {
	kind := stepKind(step)
	ev := api.BuildEvent{Type: api.BuildEventStep, Step: n, Total: total, Kind: kind}
	fail := func(format string, args ...any) error {
		return errdefs.InvalidArgument("step %d/%d (%s): %s", n, total, kind, fmt.Sprintf(format, args...))
	}
	switch kind {
	case "env":
		keys := make([]string, 0, len(step.Env))
		for k := range step.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, k+"="+step.Env[k])
		}
		st.img.Env = wire.MergeEnv(st.img.Env, kv)
		st.chain = image.ChainID(st.chain, "env:"+strings.Join(kv, "\x00"))
		ev.Detail = strings.Join(kv, " ")
		emit(ev)
	case "workdir":
		st.img.WorkDir = path.Clean(step.Workdir)
		st.chain = image.ChainID(st.chain, "workdir:"+st.img.WorkDir)
		ev.Detail = st.img.WorkDir
		emit(ev)
	case "user":
		uid, gid, err := lookupUser(st.lowerDirs(b.images), step.User)
		if err != nil {
			return fail("%v", err)
		}
		if uid == 0 {
			return fail("user %q is root; sandbox code never runs as root", step.User)
		}
		st.img.UID, st.img.GID, st.img.User = uid, gid, step.User
		st.chain = image.ChainID(st.chain, fmt.Sprintf("user:%d:%d", uid, gid))
		ev.Detail = fmt.Sprintf("%s (%d:%d)", step.User, uid, gid)
		emit(ev)
	case "run":
		id := image.ChainID(st.chain, "run:"+step.Run)
		ev.Detail = step.Run
		if err := b.layer(ctx, st, id, "run: "+step.Run, ev, emit, func(dir string) error {
			return b.run(ctx, st, n, total, step.Run, dir, emit)
		}); err != nil {
			return err
		}
	case "copy":
		if contextDir == "" {
			return fail("copy needs files: send the recipe with a build context (multipart part %q)", "context")
		}
		src, err := contextPath(contextDir, step.Copy.Src)
		if err != nil {
			return fail("%v", err)
		}
		digest, err := treeDigest(src)
		if err != nil {
			return fail("%v", err)
		}
		// A trailing "/" means "into this directory" and must survive Clean.
		dest := path.Clean(step.Copy.Dest)
		if strings.HasSuffix(step.Copy.Dest, "/") && dest != "/" {
			dest += "/"
		}
		id := image.ChainID(st.chain, "copy:"+digest+":"+dest)
		ev.Detail = step.Copy.Src + " → " + dest
		if err := b.layer(ctx, st, id, "copy: "+ev.Detail, ev, emit, func(dir string) error {
			files, size, err := treeCount(src)
			if err != nil {
				return fail("%v", err)
			}
			if err := st.copies.Add(files, size); err != nil {
				return fmt.Errorf("step %d/%d (copy): %w", n, total, err)
			}
			what := fmt.Sprintf("the layer of step %d/%d (copy)", n, total)
			if err := diskspace.Check(dir, what, size); err != nil {
				return err
			}
			return copyInto(ctx, src, dir, dest, what, size)
		}); err != nil {
			return err
		}
	default:
		return fail("unknown step")
	}
	return nil
}

// layer adds layer id to st, making it with fill unless the cache has it.
func (b *Builder) layer(ctx context.Context, st *state, id, createdBy string, ev api.BuildEvent, emit func(api.BuildEvent), fill func(dir string) error) error {
	ev.Cached = b.images.HasLayer(id)
	emit(ev)
	if !ev.Cached {
		l := &image.Layer{ID: id, Parent: st.parent, CreatedBy: createdBy}
		if err := b.images.CommitLayer(ctx, l, fill); err != nil {
			return err
		}
	}
	st.img.Layers = append(st.img.Layers, id)
	st.parent, st.chain = id, id
	return nil
}

// lowerDirs returns the build's lower dirs so far, top first.
func (st *state) lowerDirs(images *image.Store) []string {
	var dirs []string
	for i := len(st.img.Layers) - 1; i >= 0; i-- {
		dirs = append(dirs, images.LayerDir(st.img.Layers[i]))
	}
	if st.img.RootFS != "" {
		dirs = append(dirs, st.img.RootFS)
	}
	return dirs
}

// run executes cmd as root in a fresh build sandbox on st's image, streams
// its output, and captures the sandbox's writable layer into dir.
func (b *Builder) run(ctx context.Context, st *state, n, total int, cmd, dir string, emit func(api.BuildEvent)) error {
	img := st.img
	img.LowerDirs = st.lowerDirs(b.images)
	id := "bld_" + randomID()
	info, err := b.rt.Create(ctx, runtime.Spec{
		ID: id, Hostname: "build", Image: &img, Limits: b.cfg.Limits, DiskMB: b.cfg.DiskMB,
		AllowInternet: true, Build: true,
	})
	if err != nil {
		return fmt.Errorf("step %d/%d: start the build sandbox: %w", n, total, err)
	}
	defer func() {
		if err := b.rt.Destroy(context.WithoutCancel(ctx), id, info); err != nil {
			b.log.Error("remove build sandbox", "sandbox", id, "err", err)
		}
	}()
	out := newTail(64 << 10)
	lines := &lineSplitter{emit: func(line string) {
		emit(api.BuildEvent{Type: api.BuildEventLog, Step: n, Total: total, Line: line})
	}}
	agent := client.New(runtime.SocketPath(info))
	defer agent.Close()
	exit, err := agent.Exec(ctx, &wire.ExecRequest{
		Cmd: "/bin/sh", Args: []string{"-c", cmd}, Root: true,
		Env: []string{"HOME=/root", "USER=root", "DEBIAN_FRONTEND=noninteractive"},
	}, func(ev wire.ExecEvent) {
		out.Write(ev.Data)
		lines.Write(ev.Data)
	})
	lines.Flush()
	if err != nil {
		return fmt.Errorf("step %d/%d (run): %w", n, total, err)
	}
	if exit.Code != 0 || exit.Error != "" {
		why := fmt.Sprintf("exit code %d", exit.Code)
		if exit.Signal != "" {
			why = "killed by " + exit.Signal
		}
		return errdefs.InvalidArgument("step %d/%d (run) failed with %s: %s\noutput:\n%s",
			n, total, why, cmd, strings.TrimRight(out.String(), "\n"))
	}
	if err := b.rt.CaptureLayer(ctx, id, dir); err != nil {
		return fmt.Errorf("step %d/%d (run): %w", n, total, err)
	}
	return nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int
	buf []byte
	cut bool
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = slices.Clone(t.buf[len(t.buf)-t.max:])
		t.cut = true
	}
}

func (t *tail) String() string {
	if t.cut {
		return "[…]" + string(t.buf)
	}
	return string(t.buf)
}

// lineSplitter turns a byte stream into lines (a carriage return also ends
// a line, so progress bars do not pile up).
type lineSplitter struct {
	emit func(string)
	buf  []byte
}

func (l *lineSplitter) Write(p []byte) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexAny(l.buf, "\r\n")
		if i < 0 {
			break
		}
		if line := string(l.buf[:i]); strings.TrimSpace(line) != "" {
			l.emit(line)
		}
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 8<<10 { // a very long line: emit it in pieces
		l.emit(string(l.buf))
		l.buf = nil
	}
}

func (l *lineSplitter) Flush() {
	if strings.TrimSpace(string(l.buf)) != "" {
		l.emit(string(l.buf))
	}
	l.buf = nil
}

// streamLines calls emit for each line read from r.
func streamLines(r io.Reader, emit func(string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.TrimSpace(line) != "" {
			emit(line)
		}
	}
}

// contextPath returns the host path of a copy source inside the build
// context, refusing paths that escape it, directly or through a symlink.
func contextPath(contextDir, src string) (string, error) {
	c, err := CleanSrc(src)
	if err != nil {
		return "", err
	}
	p := contextDir
	if c != "." {
		for _, part := range strings.Split(c, "/") {
			p = filepath.Join(p, part)
			fi, err := os.Lstat(p)
			if errors.Is(err, os.ErrNotExist) {
				return "", fmt.Errorf("copy src %q is not in the build context", src)
			}
			if err != nil {
				return "", err
			}
			if fi.Mode()&os.ModeSymlink != 0 {
				return "", fmt.Errorf("copy src %q goes through the symlink %s of the build context", src, strings.TrimPrefix(p, contextDir+"/"))
			}
		}
	}
	return p, nil
}
