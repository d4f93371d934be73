// Package sandbox is forkbox's domain layer: the Manager creates, tracks and
// terminates sandboxes, runs commands and file operations in them, and keeps
// the metadata store and the host in agreement through the state machine in
// state.go. HTTP, MCP and chat all go through a Manager.
//
// Lifecycle of the Manager: New → Start (reconciles what a previous daemon
// left: adopts sandboxes that still run, marks and cleans the rest, starts the
// idle reaper) → calls → Close (stops the reaper; sandboxes keep running and
// are adopted by the next Start).
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/agent/client"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/batch"
	"github.com/forkbox/forkbox/internal/criu"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/keylock"
	"github.com/forkbox/forkbox/internal/lazyre"
	"github.com/forkbox/forkbox/internal/netsetup"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/snapshot"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
	"github.com/forkbox/forkbox/internal/userns"
)

// Defaults for fields a create request leaves out.
type Defaults struct {
	CPUs        float64
	MemoryMB    int64
	DiskMB      int64
	PIDsLimit   int64
	TimeoutSecs int64
}

// maxTimeoutSecs bounds a sandbox's idle timeout (a week).
const maxTimeoutSecs = 7 * 24 * 3600

// minPIDsLimit is the smallest pids_limit: room for the sandbox's init and
// agent (up to ~20 threads) and a little more.
const minPIDsLimit = 64

// DefaultDefaults are forkbox's built-in defaults.
var DefaultDefaults = Defaults{CPUs: 1, MemoryMB: 1024, DiskMB: 2048, PIDsLimit: 512, TimeoutSecs: 300}

// Runtime is what the Manager needs from the isolation layer.
type Runtime interface {
	Create(ctx context.Context, spec runtime.Spec) (*runtime.Info, error)
	Adopt(ctx context.Context, id string, info *runtime.Info) error
	// LeftoverCRIU waits, up to wait, for the CRIU workers a daemon that
	// is gone left running, and kills those still running then.
	LeftoverCRIU(ctx context.Context, wait time.Duration) (found, killed []int)
	// Recover readies a sandbox a previous daemon left for this one to
	// talk to: a tracer of its processes is waited for (until ctx ends)
	// and killed, a frozen cgroup thawed.
	Recover(ctx context.Context, id string) (runtime.Recovered, error)
	Destroy(ctx context.Context, id string, info *runtime.Info) error
	Usage(id string) runtime.Usage
	OOMKills(id string) int64
	SandboxDirs() ([]string, error)
	// SetEgress applies an egress policy to a running sandbox with
	// internet access, recording it in info.
	SetEgress(id string, info *runtime.Info, p netsetup.Policy) error
	// SetHostname renames a running sandbox (its UTS namespace).
	SetHostname(id string, info *runtime.Info, name string) error
	// DialPort connects to a port on the sandbox's own loopback.
	DialPort(ctx context.Context, id string, info *runtime.Info, port int) (net.Conn, error)
}

// Images is what the Manager needs from the image store.
type Images interface {
	Get(ctx context.Context, name string) (*image.Image, error)
}

// Manager owns the sandboxes of one daemon.
type Manager struct {
	store store.Store
	rt    Runtime
	// quotaSrc gives tenants' quotas (nil: none); quota holds the starts
	// admitted against them.
	quotaSrc QuotaSource
	quota    quotaState
	snapper  Snapshotter
	snaps    *snapshot.Store
	// cellStore keeps the cells sandboxes run (nil: none kept); cells
	// writes them in batches.
	cellStore store.CellStore
	cells     *batch.Writer[store.Cell]
	// imageBuilds are the daemon's own images' builds (imagebuilds.go).
	imageBuildsMu sync.Mutex
	imageBuilds   map[string]api.ImageReadiness
	// criu is nil when memory snapshots are unavailable; criuProblem says
	// why. Read through criuHost.
	criuMu      sync.Mutex
	criu        *criu.Host
	criuProblem string
	criuCheck   func() (*criu.Host, error)
	criuChecked time.Time
	maxFork     int
	lockWait    time.Duration // ceiling of every wait for a busy sandbox
	locks       *keylock.Map  // lifecycle locks (lockOp)
	ids         *userns.Allocator
	images      Images
	builder     ImageBuilder // nil: no builds or imports
	defaults    Defaults
	host        *hostLimits // bounds from what the host has (hostlimits.go); nil: defaultHost
	log         *slog.Logger
	metrics     *Metrics
	now         func() time.Time
	// node is this daemon's node id in a cluster ("" alone; nodes.go).
	node string

	mu    sync.Mutex
	live  map[string]*live // running sandboxes by id
	pools map[string]*pool
	// defPool is the default pool (defaultpool.go; nil: off), of
	// defPoolSize ready sandboxes.
	defPool     *pool
	defPoolSize int

	// settling are the sandboxes a restart found and has not settled yet
	// (settle.go): calls about them answer 503 with Retry-After. settled
	// is closed once every one is.
	settling  map[string]bool
	settled   chan struct{}
	agentWait time.Duration // bound on an adopted agent's first answer

	// closing: Shutdown has begun, and nothing may start a sandbox any
	// more; starting counts the creates and resumes under way, which
	// Shutdown waits for (startsDone is signalled as each ends).
	closing    bool
	starting   int
	startsDone *sync.Cond

	stop     chan struct{}
	done     chan struct{}
	reapTick int // reaper goroutine only
}

// live is the in-memory side of a running sandbox.
type live struct {
	id     string
	name   string
	tenant string // whose it is
	// keepOnIdle: suspended at its idle timeout though unnamed.
	keepOnIdle bool
	info       *runtime.Info
	agent      *client.Client
	timeout    time.Duration
	deadline   time.Time // max lifetime; zero: none
	// gate is held shared by every call and exclusively by a memory
	// checkpoint or suspend, which need no connection into the sandbox open.
	gate       *gate
	suspending bool // an idle suspend is under way (reaper goroutine only)
	// nextSuspend: an idle suspend failed; the next waits until then.
	nextSuspend    time.Time
	suspendBackoff time.Duration
	pooled         bool // ready in a warm pool: never idle-reaped
	memoryMB       int64
	mu             sync.Mutex
	memBase        memBase // the page images its memory descends from (dedup.go)
	inflight       int
	lastActive     time.Time
	persistedAt    time.Time
	// polls are the Jupyter gateway's message polls in flight (jupyter.go):
	// they hold the gate shared but count neither as calls in flight nor
	// as activity, and an exclusive operation cancels them (holdPolls keeps
	// new ones short until it is done).
	polls     map[int]context.CancelFunc
	pollSeq   int
	holdPolls int
}

func (l *live) touch(now time.Time) {
	l.mu.Lock()
	if now.After(l.lastActive) {
		l.lastActive = now
	}
	l.mu.Unlock()
}

// New returns a Manager. Call Start before serving. snaps may be nil (no
// snapshots); memory snapshots also need a usable CRIU (SetCRIU).
func New(st store.Store, rt Runtime, images Images, snaps *snapshot.Store, d Defaults, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	snapper, _ := rt.(Snapshotter)
	if snapper == nil {
		snaps = nil
	}
	m := &Manager{
		store: st, rt: rt, snapper: snapper, snaps: snaps, images: images, defaults: d, log: log,
		criuProblem: "CRIU was not checked", maxFork: 16, lockWait: DefaultLockWait,
		locks:   keylock.New("sandbox", DefaultLockWait, errPreempted),
		metrics: newMetrics(), now: time.Now,
		live: map[string]*live{}, stop: make(chan struct{}), done: make(chan struct{}),
		settling: map[string]bool{}, settled: make(chan struct{}), agentWait: DefaultAgentWait,
	}
	m.startsDone = sync.NewCond(&m.mu)
	return m
}

// SetCRIU enables memory snapshots with h, or records why they are
// unavailable when h is nil or not usable.
func (m *Manager) SetCRIU(h *criu.Host, problem string) {
	m.criuMu.Lock()
	defer m.criuMu.Unlock()
	m.setCRIULocked(h, problem)
}

func (m *Manager) setCRIULocked(h *criu.Host, problem string) {
	if h != nil && h.Usable {
		m.criu, m.criuProblem = h, ""
		return
	}
	if h != nil && h.Problem != "" {
		problem = h.Problem
	}
	m.criu, m.criuProblem = nil, problem
}

// SetCRIUCheck gives the Manager a way to check CRIU again: when memory
// snapshots were unavailable (a check can fail for a passing reason, such
// as a host limit exhausted for a moment), a call that needs them checks
// again, at most every criuRecheckEvery.
func (m *Manager) SetCRIUCheck(check func() (*criu.Host, error)) {
	m.criuMu.Lock()
	m.criuCheck = check
	m.criuMu.Unlock()
}

const criuRecheckEvery = 10 * time.Second

// criuAvailable reports whether memory snapshots work now (without checking
// again: the reaper asks it twice a second).
func (m *Manager) criuAvailable() bool {
	m.criuMu.Lock()
	defer m.criuMu.Unlock()
	return m.criu != nil
}

// criuHost returns the CRIU to use, or nil and why memory snapshots are
// unavailable.
func (m *Manager) criuHost() (*criu.Host, string) {
	m.criuMu.Lock()
	defer m.criuMu.Unlock()
	if m.criu == nil && m.criuCheck != nil && time.Since(m.criuChecked) >= criuRecheckEvery {
		m.criuChecked = time.Now()
		h, err := m.criuCheck()
		if err != nil {
			m.setCRIULocked(nil, err.Error())
		} else {
			m.setCRIULocked(h, "")
		}
		if m.criu != nil {
			m.log.Info("memory snapshots available again")
		}
	}
	return m.criu, m.criuProblem
}

// restoreMemory restores a sandbox from the memory images in criuDir (see
// runtime.RestoreMemory) and counts how its memory came back.
func (m *Manager) restoreMemory(ctx context.Context, h *criu.Host, spec runtime.Spec, criuDir string) (*runtime.Info, error) {
	info, err := m.snapper.RestoreMemory(ctx, h, spec, criuDir)
	if err != nil {
		return nil, err
	}
	fill := "eager"
	if info.LazyRestore {
		fill = "lazy"
	}
	m.metrics.restores.WithLabelValues(fill).Inc()
	return info, nil
}

// SetLockWait sets the ceiling of every wait for a sandbox that another
// operation holds (default DefaultLockWait); past it the call answers 409
// busy. Call before Start.
func (m *Manager) SetLockWait(d time.Duration) {
	if d > 0 {
		m.lockWait = d
		m.locks.SetWait(d)
	}
}

// Metrics returns the Manager's Prometheus collectors.
func (m *Manager) Metrics() *Metrics { return m.metrics }

// newID returns a fresh sandbox id.
func newID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

var (
	nameRE   = lazyre.New(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	envKeyRE = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func rangeErr(field string, v any, lo, hi any) error {
	return errdefs.InvalidArgument("%s: %v is out of range [%v, %v]", field, v, lo, hi)
}

// validate checks a create request and returns the spec with defaults.
func (m *Manager) validate(req *api.CreateSandboxRequest) (store.Spec, error) {
	d := m.defaults
	spec := store.Spec{CPUs: d.CPUs, MemoryMB: d.MemoryMB, DiskMB: d.DiskMB, PIDsLimit: d.PIDsLimit, TimeoutSecs: d.TimeoutSecs,
		AllowInternetAccess: req.AllowInternetAccess, Env: req.Env, Labels: req.Labels,
		NoAutoResume: req.AutoResume != nil && !*req.AutoResume, SuspendOnIdle: req.SuspendOnIdle}
	if req.Name != "" && (!nameRE.MatchString(req.Name) || strings.HasPrefix(req.Name, "sbx_")) {
		return spec, errdefs.InvalidArgument("name: %q must match %s and not start with sbx_", req.Name, nameRE)
	}
	if err := checkNetwork(req.Network, req.AllowInternetAccess); err != nil {
		return spec, err
	}
	spec.Network = req.Network
	if req.CPUs != nil {
		if *req.CPUs < 0.1 || *req.CPUs > 64 {
			return spec, rangeErr("cpus", *req.CPUs, 0.1, 64)
		}
		spec.CPUs = *req.CPUs
	}
	ints := []struct {
		field  string
		v      *int64
		lo, hi int64
		dst    *int64
	}{
		{"memory_mb", req.MemoryMB, 64, 65536, &spec.MemoryMB},
		{"disk_mb", req.DiskMB, 64, 1 << 20, &spec.DiskMB},
		// pids_limit is the cgroup's: forkbox's own init and agent (Go,
		// a thread per blocking system call) count too, and at 16 they
		// sometimes did not fit (a create answered 500; found by the
		// random driver).
		{"pids_limit", req.PIDsLimit, minPIDsLimit, 32768, &spec.PIDsLimit},
		{"timeout_secs", req.TimeoutSecs, 1, maxTimeoutSecs, &spec.TimeoutSecs},
		{"max_lifetime_secs", req.MaxLifetimeSecs, 0, 365 * 24 * 3600, &spec.MaxLifetimeSecs},
	}
	for _, f := range ints {
		if f.v == nil {
			continue
		}
		if *f.v < f.lo || *f.v > f.hi {
			return spec, rangeErr(f.field, *f.v, f.lo, f.hi)
		}
		*f.dst = *f.v
	}
	if err := m.validateHost(req, &spec); err != nil {
		return spec, err
	}
	for k, v := range req.Env {
		if !envKeyRE.MatchString(k) {
			return spec, errdefs.InvalidArgument("env: %q is not a valid variable name", k)
		}
		if strings.ContainsRune(v, 0) {
			return spec, errdefs.InvalidArgument("env: value of %s contains a NUL byte", k)
		}
	}
	for k, v := range req.Labels {
		if k == PoolLabel || k == PoolReadyLabel || k == PoolImageLabel {
			// Pools' own: a sandbox labelled so would pass for a
			// pool's ready sandbox, and be handed to someone else.
			return spec, errdefs.InvalidArgument("labels: %q is reserved for warm pools", k)
		}
		if k == "" || len(k) > 63 || len(v) > 255 || strings.ContainsAny(k, ":=,") {
			return spec, errdefs.InvalidArgument("labels: %q: keys are 1-63 chars without ':', '=' or ',', values at most 255", k)
		}
	}
	return spec, nil
}

// Create validates req, records the sandbox and starts it.
func (m *Manager) Create(ctx context.Context, req *api.CreateSandboxRequest) (*api.Sandbox, error) {
	return m.create(ctx, req, createOpts{})
}

// createOpts are what the daemon's own creates add to a request.
type createOpts struct {
	// verified: req's snapshot has just been checked against its
	// checksum by the caller (a fork's branches share one check).
	verified bool
	// poolLabels mark a pool's new ready sandbox (labels no request may
	// set); such a create is never served from a pool itself.
	poolLabels map[string]string
}

// create is Create with the daemon's own options.
func (m *Manager) create(ctx context.Context, req *api.CreateSandboxRequest, o createOpts) (*api.Sandbox, error) {
	started, err := m.beginStart()
	if err != nil {
		return nil, err
	}
	defer started()
	if req.Pool != "" {
		return m.createFromPool(ctx, req)
	}
	if o.poolLabels == nil && m.defaultPoolFits(ctx, req) {
		sb, err := m.createFromDefaultPool(ctx, req)
		if sb != nil || err != nil {
			return sb, err
		}
	}
	spec, err := m.validate(req)
	if err != nil {
		return nil, err
	}
	if o.poolLabels != nil {
		spec.Labels = maps.Clone(spec.Labels)
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		maps.Copy(spec.Labels, o.poolLabels)
	}
	verified := o.verified
	imgName := req.Image
	var fromFS, snapID, criuDir string
	var fromFSBase uint32
	if req.SnapshotID != "" {
		if m.snaps == nil {
			return nil, errdefs.NotFound("snapshot %q not found", req.SnapshotID)
		}
		sn, restored, err := m.restoreSource(ctx, req, spec, verified)
		if err != nil {
			return nil, err
		}
		if sn.Type == api.SnapshotMemory {
			if h, problem := m.criuHost(); h == nil {
				return nil, errdefs.Unavailable("memory snapshots are unavailable on this host: %s", problem)
			}
			criuDir = filepath.Join(m.snaps.Path(sn.ID), criuDirName)
		}
		// A restore joins the snapshot's lineage: its id range.
		spec, imgName, snapID, fromFS, fromFSBase = restored, sn.Image, sn.ID, m.snapshotFS(sn.ID), sn.Spec.UIDBase
	}
	if imgName == "" {
		imgName = image.DefaultImage
	}
	var img *image.Image
	if snapID != "" {
		img, err = m.images.Get(ctx, imgName) // the snapshot's, by its store name
	} else {
		img, err = m.resolveImage(ctx, imgName)
	}
	if err != nil {
		return nil, err // it names the image: `image "x" not found`
	}
	imgName = img.Name
	id := newID("sbx_")
	releaseQuota, err := m.admitQuota(ctx, owner(ctx), id, spec)
	if err != nil {
		return nil, err
	}
	defer releaseQuota()
	release, err := m.admit(ctx, id, spec, snapID)
	if err != nil {
		return nil, err
	}
	defer release()
	// The lock is the new sandbox's from before its record exists, so a
	// delete that finds the record in state creating cancels this create
	// and waits for it to unwind.
	opCtx, unlock, err := m.lockOp(ctx, id, "create", lockOpts{})
	if err != nil {
		return nil, err
	}
	defer unlock()
	now := m.now().UTC()
	sb := &store.Sandbox{
		ID: id, Name: req.Name, State: api.StateCreating, Image: imgName, SnapshotID: snapID,
		Spec: spec, CreatedAt: now, LastActiveAt: now, Node: m.node,
	}
	if err := m.store.Create(ctx, sb); err != nil {
		return nil, err
	}
	start := time.Now()
	// From here on every way out, a panic included, either records the
	// sandbox running or marks it error and frees what it held.
	failure := "create was interrupted by an internal error"
	done := false
	defer func() {
		if !done {
			m.metrics.createFailures.Inc()
			m.setError(context.WithoutCancel(opCtx), id, "create failed: "+failure)
		}
	}()
	fail := func(err error) (*api.Sandbox, error) {
		err = opErr(opCtx, err)
		failure = err.Error()
		return nil, err
	}
	if err := hookPoint(opCtx, "create:recorded", id, sb.Name); err != nil {
		return fail(err)
	}
	env := make([]string, 0, len(spec.Env))
	for _, k := range sortedKeys(spec.Env) {
		env = append(env, k+"="+spec.Env[k])
	}
	hostname := sb.Name
	if hostname == "" {
		hostname = sb.ID
	}
	rspec := runtime.Spec{
		ID: sb.ID, Hostname: hostname, Image: img,
		Limits:        m.limits(spec),
		DiskMB:        spec.DiskMB,
		AllowInternet: spec.AllowInternetAccess,
		Egress:        egress(spec),
		Env:           env,
		FromFS:        fromFS,
		UIDBase:       spec.UIDBase,
		FromFSBase:    fromFSBase,
	}
	var info *runtime.Info
	if criuDir != "" {
		h, _ := m.criuHost()
		info, err = m.restoreMemory(opCtx, h, rspec, criuDir)
	} else {
		info, err = m.rt.Create(opCtx, rspec)
	}
	if err != nil {
		return fail(fmt.Errorf("create sandbox: %w", err))
	}
	m.metrics.createSeconds.Observe(time.Since(start).Seconds())
	l := m.track(sb, info) // a failure from here on is undone by setError, which untracks
	if criuDir != "" {
		l.setBase(baseIn(snapID, criuDir))
	}
	if err := hookPoint(opCtx, "create:started", id, sb.Name); err != nil {
		return fail(err)
	}
	sb, err = m.store.Update(opCtx, sb.ID, func(s *store.Sandbox) error {
		if err := checkTransition(s.ID, s.State, api.StateRunning); err != nil {
			return err
		}
		s.State, s.StateReason = api.StateRunning, ""
		s.Runtime = runtime.MarshalInfo(info)
		s.Spec.UIDBase = info.UIDBase // a new lineage's range
		return nil
	})
	if err != nil {
		return fail(err)
	}
	done = true
	m.log.Info("sandbox created", "sandbox", sb.ID, "name", sb.Name, "ms", time.Since(start).Milliseconds())
	return m.view(sb), nil
}

func sortedKeys(mp map[string]string) []string {
	keys := make([]string, 0, len(mp))
	for k := range mp {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (m *Manager) track(sb *store.Sandbox, info *runtime.Info) *live {
	l := &live{
		id: sb.ID, name: sb.Name, tenant: sb.Tenant, keepOnIdle: sb.Spec.SuspendOnIdle, info: info, gate: newGate(),
		agent:      client.New(runtime.SocketPath(info)),
		timeout:    time.Duration(sb.Spec.TimeoutSecs) * time.Second,
		lastActive: sb.LastActiveAt, persistedAt: sb.LastActiveAt, memoryMB: sb.Spec.MemoryMB,
	}
	if sb.Spec.MaxLifetimeSecs > 0 {
		l.deadline = sb.CreatedAt.Add(time.Duration(sb.Spec.MaxLifetimeSecs) * time.Second)
	}
	m.mu.Lock()
	m.live[sb.ID] = l
	m.mu.Unlock()
	return l
}

func (m *Manager) untrack(id string) *live {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.live[id]
	delete(m.live, id)
	if l != nil {
		l.agent.Close()
	}
	return l
}

// setError records that a sandbox failed, and frees what it held.
func (m *Manager) setError(ctx context.Context, id, reason string) {
	sb, err := m.store.Update(ctx, id, func(s *store.Sandbox) error {
		if s.State.Ended() {
			return errAlready
		}
		s.State, s.StateReason = api.StateError, reason
		return nil
	})
	if err != nil && !errors.Is(err, errAlready) {
		m.log.Error("record sandbox error", "sandbox", id, "err", err)
	}
	l := m.untrack(id)
	var info *runtime.Info
	switch {
	case l != nil:
		info = l.info
	case sb != nil:
		info, _ = runtime.UnmarshalInfo(sb.Runtime)
	}
	if info == nil {
		info = &runtime.Info{}
	}
	if err := m.rt.Destroy(ctx, id, info); err != nil {
		m.log.Error("clean up failed sandbox", "sandbox", id, "err", err)
	}
	m.log.Warn("sandbox failed", "sandbox", id, "reason", reason)
	m.memberGone(id, true)
}

var errAlready = errors.New("already in that state")

// OnExit is the runtime's callback for a sandbox whose init died on its own.
func (m *Manager) OnExit(id, reason string) {
	m.setError(context.Background(), id, reason)
}

// Get returns one sandbox by id or name.
func (m *Manager) Get(ctx context.Context, ref string) (*api.Sandbox, error) {
	sb, err := m.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	if hiddenMember(sb) {
		return nil, errdefs.NotFound("sandbox %q not found", ref)
	}
	return m.view(sb), nil
}

// List returns sandboxes, newest first.
func (m *Manager) List(ctx context.Context, f store.ListFilter) ([]api.Sandbox, error) {
	sbs, err := m.store.List(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]api.Sandbox, 0, len(sbs))
	for _, sb := range sbs {
		if !hiddenMember(sb) {
			out = append(out, *m.view(sb))
		}
	}
	return out, nil
}

// view turns a record into the API object, with live usage and activity.
func (m *Manager) view(sb *store.Sandbox) *api.Sandbox {
	v := &api.Sandbox{
		ID: sb.ID, Name: sb.Name, State: sb.State, StateReason: sb.StateReason, Image: displayImage(sb.Image),
		SnapshotID: sb.SnapshotID, CPUs: sb.Spec.CPUs, MemoryMB: sb.Spec.MemoryMB, DiskMB: sb.Spec.DiskMB,
		PIDsLimit: sb.Spec.PIDsLimit, TimeoutSecs: sb.Spec.TimeoutSecs, MaxLifetimeSecs: sb.Spec.MaxLifetimeSecs,
		AllowInternetAccess: sb.Spec.AllowInternetAccess, Network: sb.Spec.Network,
		Env: maps.Clone(sb.Spec.Env), Labels: maps.Clone(sb.Spec.Labels),
		AutoResume: !sb.Spec.NoAutoResume, SuspendOnIdle: sb.Spec.SuspendOnIdle,
		CreatedAt: sb.CreatedAt, LastActiveAt: sb.LastActiveAt, TerminatedAt: sb.TerminatedAt,
	}
	if m.node != "" {
		v.Node = sb.Node
	}
	m.mu.Lock()
	l := m.live[sb.ID]
	m.mu.Unlock()
	if l != nil && sb.State == api.StateRunning {
		l.mu.Lock()
		if l.lastActive.After(v.LastActiveAt) {
			v.LastActiveAt = l.lastActive
		}
		l.mu.Unlock()
		u := m.rt.Usage(sb.ID)
		v.Usage = &api.Usage{CPUSeconds: u.CPUSeconds, MemoryBytes: u.MemoryBytes, MemoryPeakBytes: u.MemoryPeakBytes,
			PIDs: u.PIDs, DiskUsedBytes: u.DiskUsedBytes}
	}
	if sb.State != api.StateTerminated {
		if v.Usage == nil {
			v.Usage = &api.Usage{}
		}
		v.Usage.RunningSeconds, v.Usage.SuspendedSeconds = m.stateTimes(sb)
	}
	return v
}

// stateTimes adds up the seconds a sandbox spent running and suspended,
// from its state history, since it was created (a sandbox handed out from
// a pool was created then; its time in the pool is not its own).
func (m *Manager) stateTimes(sb *store.Sandbox) (running, suspended float64) {
	evs, err := m.store.Events(context.Background(), sb.ID)
	if err != nil {
		return 0, 0
	}
	now := m.now()
	for i, e := range evs {
		end := now
		if i+1 < len(evs) {
			end = evs[i+1].At
		}
		start := e.At
		if start.Before(sb.CreatedAt) {
			start = sb.CreatedAt
		}
		if end.Before(start) {
			continue
		}
		d := end.Sub(start).Seconds()
		switch e.To {
		case api.StateRunning:
			running += d
		case api.StateSuspended:
			suspended += d
		}
	}
	return running, suspended
}

// Delete terminates a sandbox and frees everything it held. Deleting a
// terminated sandbox is a no-op that returns it. A delete wins over any
// operation under way on the sandbox: it cancels it and waits (within the
// lock-wait ceiling) for it to unwind.
func (m *Manager) Delete(ctx context.Context, ref string) (*api.Sandbox, error) {
	sb, err := m.store.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if sb.State == api.StateTerminated {
		return m.view(sb), nil
	}
	return m.terminate(ctx, sb.ID, "deleted", lockOpts{Preempt: true})
}

// terminate destroys sandbox id. Once it holds the lock nothing preempts it
// (a second delete waits it out), so it never stops half way.
func (m *Manager) terminate(ctx context.Context, id, reason string, o lockOpts) (*api.Sandbox, error) {
	o.Firm = true
	ctx, unlock, err := m.lockOp(ctx, id, "delete", o)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return m.end(ctx, id, reason)
}

// end is terminate for a caller that holds the sandbox's lifecycle lock.
func (m *Manager) end(ctx context.Context, id, reason string) (*api.Sandbox, error) {
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.State == api.StateTerminated { // by another call while this one waited
		return m.view(sb), nil
	}
	// Another node's sandbox: only what holds no processes there (a
	// suspended, lost or failed one) can be ended here.
	if m.elsewhere(sb) && sb.State != api.StateSuspended && sb.State != api.StateLost && sb.State != api.StateError {
		return nil, errElsewhere(sb)
	}
	if err := hookPoint(ctx, "delete:locked", id, sb.Name); err != nil {
		return nil, err
	}
	l := m.untrack(id)
	var info *runtime.Info
	if l != nil {
		info = l.info
	} else if info, err = runtime.UnmarshalInfo(sb.Runtime); err != nil {
		return nil, fmt.Errorf("sandbox %s runtime record: %w", id, err)
	}
	// Another node's (lost, suspended) sandbox holds nothing here; what it
	// left on its node, that node frees when it comes back (reconcile).
	if !m.elsewhere(sb) {
		if err := m.rt.Destroy(ctx, id, info); err != nil {
			// Leave the row live so that a retry (or the next start) cleans up.
			return nil, fmt.Errorf("terminate sandbox %s: %w", id, err)
		}
	}
	now := m.now().UTC()
	var suspendImage string
	sb, err = m.store.Update(ctx, id, func(s *store.Sandbox) error {
		if err := checkTransition(s.ID, s.State, api.StateTerminated); err != nil {
			return err
		}
		s.State, s.StateReason, s.TerminatedAt = api.StateTerminated, reason, &now
		suspendImage, s.SuspendImage = s.SuspendImage, ""
		return nil
	})
	if err != nil {
		return nil, err
	}
	if suspendImage != "" {
		m.dropSnapshot(ctx, suspendImage)
	}
	m.metrics.terminated.WithLabelValues(reason).Inc()
	m.log.Info("sandbox terminated", "sandbox", id, "reason", reason)
	m.memberGone(id, false)
	return m.view(sb), nil
}

// acquire finds a running sandbox for a call (resuming a suspended one),
// marks it busy and active. The returned release must be called when the
// call ends. Waits are bounded by ctx and the lock-wait ceiling.
func (m *Manager) acquire(ctx context.Context, ref string) (*live, func(), error) {
	for {
		l, release, err := m.acquireOnce(ctx, ref)
		if err != nil {
			return nil, nil, err
		}
		// A suspend may have freed the sandbox while this call waited at
		// its gate: then start over (which resumes it).
		if m.current(l) {
			return l, release, nil
		}
		release()
	}
}

// current reports whether l is still the live entry of its sandbox.
func (m *Manager) current(l *live) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[l.id] == l
}

func (m *Manager) acquireOnce(ctx context.Context, ref string) (*live, func(), error) {
	l := m.findLiveFor(ctx, ref)
	if l != nil {
		if err := m.settlingErr(l.id); err != nil {
			return nil, nil, err
		}
	}
	if l == nil {
		// Not running here: the store says why (unknown, terminated, …).
		sb, err := m.lookup(ctx, ref)
		if err != nil {
			return nil, nil, err
		}
		if m.elsewhere(sb) {
			return nil, nil, errElsewhere(sb)
		}
		if sb.State == api.StateSuspended || sb.State == api.StateResuming || sb.State == api.StateSuspending {
			if err := m.resumeFor(ctx, sb); err != nil {
				return nil, nil, err
			}
			l = m.findLive(sb.ID)
			if l == nil {
				sb, _ = m.store.Get(ctx, sb.ID)
			}
		}
		if l == nil {
			return nil, nil, notRunning(sb)
		}
	}
	unlock, err := l.gate.acquire(ctx, l.id, "", false, m.lockWait)
	if err != nil {
		return nil, nil, err
	}
	return l, m.busy(l, unlock, true), nil
}

// notRunning is the error of a call that needs sb running.
func notRunning(sb *store.Sandbox) error {
	msg := fmt.Sprintf("sandbox %s is %s", sb.ID, sb.State)
	if sb.StateReason != "" {
		msg += " (" + sb.StateReason + ")"
	}
	return errdefs.FailedPrecondition("%s", msg)
}

// busy marks l in use (never idle-reaped meanwhile) and returns the
// release. A user's call (touch) also counts as activity.
func (m *Manager) busy(l *live, unlock func(), touch bool) func() {
	l.mu.Lock()
	l.inflight++
	l.mu.Unlock()
	if touch {
		l.touch(m.now())
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.inflight--
			l.mu.Unlock()
			if touch {
				l.touch(m.now())
			}
			unlock()
		})
	}
}

// acquireExclusive is acquire for operations that need a running sandbox to
// themselves (a memory checkpoint, a suspend; the caller holds the
// sandbox's lifecycle lock): it waits, within the lock-wait ceiling, for the
// calls in flight to end and keeps new ones waiting until released. It never
// resumes a sandbox.
func (m *Manager) acquireExclusive(ctx context.Context, id, op string) (*live, func(), error) {
	l := m.findLive(id)
	if l == nil {
		return nil, nil, errdefs.FailedPrecondition("sandbox %s is not running", id)
	}
	// A notebook's message poll would hold the gate until it times out.
	unhold := l.holdPollsOff()
	unlock, err := l.gate.acquire(ctx, id, op, true, m.lockWait)
	if err != nil {
		unhold()
		return nil, nil, err
	}
	if !m.current(l) { // it died while this waited
		unlock()
		unhold()
		return nil, nil, errdefs.FailedPrecondition("sandbox %s stopped running", id)
	}
	release := m.busy(l, unlock, false)
	return l, func() { release(); unhold() }, nil
}

// findLive finds a running sandbox by id or name without touching the store
// (the hot path of every exec and file call).
// findLiveFor is findLive for a request: only the context's tenant's
// sandboxes are found, and names are looked up among them.
func (m *Manager) findLiveFor(ctx context.Context, ref string) *live {
	scope := tenant.Of(ctx)
	if scope == "" {
		return m.findLive(ref)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.live[ref]; l != nil {
		if l.tenant == scope {
			return l
		}
		return nil
	}
	if ref == "" {
		return nil
	}
	for _, l := range m.live {
		if l.name == ref && l.tenant == scope {
			return l
		}
	}
	return nil
}

// findLive finds a running sandbox by id, or else by name, of any tenant
// (the daemon's own work; requests use findLiveFor).
func (m *Manager) findLive(ref string) *live {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.live[ref]; l != nil {
		return l
	}
	if ref == "" {
		return nil
	}
	for _, l := range m.live {
		if l.name == ref {
			return l
		}
	}
	return nil
}

// agentErr explains an agent failure: if the sandbox went away meanwhile the
// call failed because of that.
func (m *Manager) agentErr(l *live, err error) error {
	m.mu.Lock()
	_, still := m.live[l.id]
	m.mu.Unlock()
	if !still {
		return errdefs.FailedPrecondition("sandbox %s was terminated during the call", l.id)
	}
	return err
}

// envList checks variables given for a process (names, no NUL in values)
// and returns them as KEY=VALUE, sorted.
func envList(env map[string]string) ([]string, error) {
	var out []string
	for _, k := range sortedKeys(env) {
		if !envKeyRE.MatchString(k) {
			return nil, errdefs.InvalidArgument("env: %q is not a valid variable name", k)
		}
		if strings.ContainsRune(env[k], 0) {
			return nil, errdefs.InvalidArgument("env: value of %s contains a NUL byte", k)
		}
		out = append(out, k+"="+env[k])
	}
	return out, nil
}

// ExecOptions streams output while a command runs; nil callbacks are skipped.
type ExecOptions struct {
	OnStdout, OnStderr func([]byte)
	// OnStart is called once the command has started (and, with an ID, can
	// be reached by ExecInput and ExecSignal); an agent restored from an
	// older snapshot does not report it.
	OnStart func()
	// ID registers the command under this name while it runs (see
	// ExecInput, ExecSignal): 1 to 64 of A-Z a-z 0-9 _ -, unique among
	// the sandbox's running commands.
	ID string
	// KeepStdin keeps the command's stdin open after req.Stdin for
	// ExecInput; it needs an ID.
	KeepStdin bool
	// PTY, when set, runs the command on a new pseudo-terminal of this
	// size (its stdin, stdout, stderr and controlling terminal): its
	// output goes to OnPTY (or, without it, to the result's stdout),
	// ExecInput writes to the terminal, ExecResize resizes it. It needs
	// an ID and implies KeepStdin.
	PTY   *PTYSize
	OnPTY func([]byte)
}

// PTYSize is a terminal's size in characters: 1 to 1000 columns and rows.
type PTYSize struct {
	Cols, Rows uint16
}

// Exec runs a command in a sandbox.
func (m *Manager) Exec(ctx context.Context, ref string, req *api.ExecRequest, opts ExecOptions) (*api.ExecResult, error) {
	if req.Cmd == "" {
		return nil, errdefs.InvalidArgument("cmd: is required")
	}
	areq := &wire.ExecRequest{Cmd: req.Cmd, Args: req.Args, Cwd: req.Cwd, Stdin: []byte(req.Stdin),
		ID: opts.ID, KeepStdin: opts.KeepStdin}
	if opts.ID != "" && !execIDRE.MatchString(opts.ID) {
		return nil, errdefs.InvalidArgument("exec id %q: want 1 to 64 of A-Z a-z 0-9 _ -", opts.ID)
	}
	if opts.KeepStdin && opts.ID == "" {
		return nil, errdefs.InvalidArgument("keeping stdin open needs an exec id")
	}
	if opts.PTY != nil {
		if opts.ID == "" {
			return nil, errdefs.InvalidArgument("a command on a pty needs an exec id")
		}
		sz := wire.PTYSize{Cols: opts.PTY.Cols, Rows: opts.PTY.Rows}
		if err := sz.Check(); err != nil {
			return nil, err
		}
		areq.PTY = &sz
		areq.KeepStdin = true
	}
	if req.TimeoutSecs != nil {
		if *req.TimeoutSecs < 0.001 || *req.TimeoutSecs > 86400 {
			return nil, rangeErr("timeout_secs", *req.TimeoutSecs, 0.001, 86400)
		}
		areq.TimeoutMS = int64(*req.TimeoutSecs * 1000)
		if areq.TimeoutMS < 1 {
			areq.TimeoutMS = 1
		}
	}
	env, err := envList(req.Env)
	if err != nil {
		return nil, err
	}
	areq.Env = env
	for _, a := range append([]string{req.Cmd, req.Cwd}, req.Args...) {
		if strings.ContainsRune(a, 0) {
			return nil, errdefs.InvalidArgument("cmd, args, cwd: %q contains a NUL byte", a)
		}
	}
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer release()
	before := m.rt.OOMKills(l.id)
	var out, errb cappedBuffer
	start := time.Now()
	st, err := l.agent.Exec(ctx, areq, func(ev wire.ExecEvent) {
		if ev.Started && opts.OnStart != nil {
			opts.OnStart()
		}
		switch ev.Stream {
		case "stdout":
			if opts.OnStdout != nil {
				opts.OnStdout(ev.Data)
			} else {
				out.write(ev.Data)
			}
		case "stderr":
			if opts.OnStderr != nil {
				opts.OnStderr(ev.Data)
			} else {
				errb.write(ev.Data)
			}
		case "pty":
			if opts.OnPTY != nil {
				opts.OnPTY(ev.Data)
			} else {
				out.write(ev.Data)
			}
		}
	})
	m.metrics.execSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, m.agentErr(l, err)
	}
	res := &api.ExecResult{Stdout: out.String(), Stderr: errb.String(), ExitCode: st.Code, DurationMS: st.DurationMS,
		Signal: st.Signal, TimedOut: st.TimedOut, Error: st.Error}
	if st.Signal == "SIGKILL" && !st.TimedOut && m.rt.OOMKills(l.id) > before {
		res.OOMKilled = true
		res.Error = "killed by the kernel: out of memory (the sandbox's memory_mb limit was reached)"
	}
	return res, nil
}

// ReadFile opens a file of a sandbox for reading.
func (m *Manager) ReadFile(ctx context.Context, ref, path string) (io.ReadCloser, int64, error) {
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, 0, err
	}
	rc, size, err := l.agent.ReadFile(ctx, path)
	if err != nil {
		release()
		return nil, 0, m.agentErr(l, err)
	}
	return &releaseCloser{ReadCloser: rc, release: release}, size, nil
}

type releaseCloser struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (r *releaseCloser) Close() error {
	err := r.ReadCloser.Close()
	r.once.Do(r.release)
	return err
}

// WriteFile writes body to a file of a sandbox.
func (m *Manager) WriteFile(ctx context.Context, ref, path string, mode uint32, body io.Reader) (*api.WriteFileResult, error) {
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer release()
	p, n, err := l.agent.WriteFile(ctx, path, mode, body)
	if err != nil {
		return nil, m.agentErr(l, err)
	}
	return &api.WriteFileResult{Path: p, Size: n}, nil
}

// RemoveFile removes a file or directory of a sandbox.
func (m *Manager) RemoveFile(ctx context.Context, ref, path string, recursive bool) error {
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return err
	}
	defer release()
	if err := l.agent.RemoveFile(ctx, path, recursive); err != nil {
		return m.agentErr(l, err)
	}
	return nil
}

// ListFiles lists a directory of a sandbox.
func (m *Manager) ListFiles(ctx context.Context, ref, path string) (*api.FileList, error) {
	l, release, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer release()
	dir, entries, err := l.agent.ListFiles(ctx, path)
	if err != nil {
		return nil, m.agentErr(l, err)
	}
	out := &api.FileList{Path: dir, Entries: make([]api.FileInfo, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, api.FileInfo{Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size, Mode: e.Mode, ModifiedAt: e.ModTime})
	}
	return out, nil
}

// maxExecOutput bounds what an exec answered as one JSON object keeps of
// each stream: the daemon would otherwise hold a command's output without
// end (an event stream passes everything through instead).
const maxExecOutput = 4 << 20

// cappedBuffer keeps the first maxExecOutput bytes written to it, then notes
// that the rest was dropped.
type cappedBuffer struct {
	b       strings.Builder
	dropped bool
}

func (c *cappedBuffer) write(p []byte) {
	if room := maxExecOutput - c.b.Len(); len(p) > room {
		if !c.dropped {
			c.b.Write(p[:max(room, 0)])
			c.dropped = true
		}
		return
	}
	c.b.Write(p)
}

func (c *cappedBuffer) String() string {
	if c.dropped {
		return c.b.String() + "\n[forkbox: output beyond 4 MiB was dropped; exec with Accept: text/event-stream to receive all of it]\n"
	}
	return c.b.String()
}
