package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/agent/wire"
	"github.com/forkbox/forkbox/internal/criu"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/netsetup"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/snapshot"
	"github.com/forkbox/forkbox/internal/store"
)

// The Manager's tests without root: a fake Runtime and Snapshotter stand in
// for namespaces, cgroups and CRIU, and every sandbox they "start" gets a
// small agent of its own that speaks the agent's wire types
// (internal/agent/wire) on a real Unix socket, so the Manager's real agent
// client, store (SQLite), snapshot store and state machine are what is
// tested. The real agent server cannot serve here: its routes are
// internal/agent/server's own and it runs only as a sandbox's init.

// fakeRuntime is a Runtime and a Snapshotter whose sandboxes are fake
// agents in directories of root.
type fakeRuntime struct {
	root string // short: a socket's path must fit in sockaddr_un

	mu        sync.Mutex
	seq       int
	boxes     map[string]*fakeBox // "running" sandboxes by id
	dirs      map[string]bool     // sandbox directories left on the host (SandboxDirs)
	destroyed map[string]int      // Destroy calls by id
	hostnames map[string]string   // SetHostname's last name by id
	frozen    map[string]bool
	// leftoverChecks counts LeftoverCRIU calls (once per start).
	leftoverChecks int
	creates        int
	restores       []string                // criu dirs restored from, in order
	specs          map[string]runtime.Spec // the last create's or restore's spec by id
	// Failure injection and hooks (nil: none).
	createHook    func(ctx context.Context, spec runtime.Spec) error
	restoreHook   func(spec runtime.Spec) error
	checkpointErr error
	// checkpointHook runs at the start of CheckpointMemory.
	checkpointHook func(ctx context.Context) error
	afterRestore   func(id string)
	// recoverHook runs at the start of Recover (a leftover CRIU being
	// waited for, say).
	recoverHook func(ctx context.Context, id string)
	// stuck sandboxes stay frozen through Recover: their agent never
	// answers.
	stuck map[string]bool
}

// The Manager finds the Snapshotter by a type assertion: a signature that
// drifted would turn snapshots off silently.
var (
	_ Runtime     = (*fakeRuntime)(nil)
	_ Snapshotter = (*fakeRuntime)(nil)
)

// fakeBox is one sandbox of a fakeRuntime: its runtime info and agent.
type fakeBox struct {
	info  *runtime.Info
	agent *fakeAgent
	srv   *http.Server
}

func newFakeRuntime(t testing.TB) *fakeRuntime {
	root, err := os.MkdirTemp("", "sandbox-unit-")
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeRuntime{root: root, boxes: map[string]*fakeBox{}, dirs: map[string]bool{}, destroyed: map[string]int{},
		hostnames: map[string]string{}, frozen: map[string]bool{}, specs: map[string]runtime.Spec{}}
	t.Cleanup(func() {
		r.mu.Lock()
		boxes := r.boxes
		r.boxes = map[string]*fakeBox{}
		r.mu.Unlock()
		for _, b := range boxes {
			b.srv.Close()
		}
		os.RemoveAll(root)
	})
	return r
}

// spawn starts sandbox id's agent, as a create or restore would, and
// returns its runtime info.
func (r *fakeRuntime) spawn(id string) (*runtime.Info, error) {
	r.mu.Lock()
	r.seq++
	n := r.seq
	r.mu.Unlock()
	dir := filepath.Join(r.root, strconv.Itoa(n))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", filepath.Join(dir, wire.SocketName))
	if err != nil {
		return nil, err
	}
	a := &fakeAgent{id: id, gen: n, files: map[string][]byte{}, frozen: func() bool { return r.isFrozen(id) }}
	srv := &http.Server{Handler: a}
	go srv.Serve(ln)
	info := &runtime.Info{Dir: dir, RunDir: dir, PID: 10000 + n, UIDBase: 100000}
	r.mu.Lock()
	r.boxes[id] = &fakeBox{info: info, agent: a, srv: srv}
	r.dirs[id] = true
	r.mu.Unlock()
	return info, nil
}

// killAgent stops sandbox id's agent; its "processes" stay (Adopt succeeds).
func (r *fakeRuntime) killAgent(id string) {
	r.mu.Lock()
	b := r.boxes[id]
	r.mu.Unlock()
	if b != nil {
		b.srv.Close()
	}
}

func (r *fakeRuntime) box(id string) *fakeBox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.boxes[id]
}

func (r *fakeRuntime) alive(id string) bool { return r.box(id) != nil }

func (r *fakeRuntime) destroyCount(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.destroyed[id]
}

func (r *fakeRuntime) spec(id string) runtime.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.specs[id]
}

func (r *fakeRuntime) hostname(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hostnames[id]
}

func (r *fakeRuntime) restoreCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.restores)
}

func (r *fakeRuntime) createCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.creates
}

func (r *fakeRuntime) set(f func(r *fakeRuntime)) {
	r.mu.Lock()
	f(r)
	r.mu.Unlock()
}

func (r *fakeRuntime) Create(ctx context.Context, spec runtime.Spec) (*runtime.Info, error) {
	r.mu.Lock()
	r.creates++
	r.specs[spec.ID] = spec
	hook := r.createHook
	r.mu.Unlock()
	if spec.Image == nil {
		return nil, errors.New("fake runtime: no image")
	}
	if hook != nil {
		if err := hook(ctx, spec); err != nil {
			return nil, err
		}
	}
	return r.spawn(spec.ID)
}

func (r *fakeRuntime) Adopt(_ context.Context, id string, info *runtime.Info) error {
	if b := r.box(id); b != nil && b.info.PID == info.PID {
		return nil
	}
	return fmt.Errorf("sandbox %s: init %d is gone", id, info.PID)
}

func (r *fakeRuntime) Destroy(_ context.Context, id string, _ *runtime.Info) error {
	r.mu.Lock()
	r.destroyed[id]++
	b := r.boxes[id]
	delete(r.boxes, id)
	delete(r.dirs, id)
	r.mu.Unlock()
	if b != nil {
		b.srv.Close()
	}
	return nil
}

func (r *fakeRuntime) Usage(string) runtime.Usage { return runtime.Usage{} }
func (r *fakeRuntime) OOMKills(string) int64      { return 0 }

func (r *fakeRuntime) SandboxDirs() ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id := range r.dirs {
		ids = append(ids, id)
	}
	return ids, nil
}

func (r *fakeRuntime) SetEgress(id string, _ *runtime.Info, _ netsetup.Policy) error {
	if !r.alive(id) {
		return fmt.Errorf("sandbox %s is not running", id)
	}
	return nil
}

func (r *fakeRuntime) SetHostname(id string, _ *runtime.Info, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hostnames[id] = name
	return nil
}

func (r *fakeRuntime) DialPort(context.Context, string, *runtime.Info, int) (net.Conn, error) {
	return nil, errors.New("fake runtime: no ports")
}

func (r *fakeRuntime) Freeze(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.boxes[id] == nil {
		return fmt.Errorf("freeze %s: not running", id)
	}
	r.frozen[id] = true
	return nil
}

func (r *fakeRuntime) Thaw(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.frozen, id)
	return nil
}

func (r *fakeRuntime) LeftoverCRIU(context.Context, time.Duration) (found, killed []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leftoverChecks++
	return nil, nil
}

// Recover thaws a frozen sandbox, as the real one does after waiting for
// a leftover CRIU.
func (r *fakeRuntime) Recover(ctx context.Context, id string) (runtime.Recovered, error) {
	r.mu.Lock()
	hook := r.recoverHook
	r.mu.Unlock()
	if hook != nil {
		hook(ctx, id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var rec runtime.Recovered
	if r.frozen[id] && !r.stuck[id] {
		rec.Frozen = true
		delete(r.frozen, id)
	}
	return rec, nil
}

func (r *fakeRuntime) isFrozen(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.frozen[id]
}

func (r *fakeRuntime) ExportFS(_ context.Context, id, dst string) error {
	return os.WriteFile(dst, []byte("writable layer of "+id), 0o600)
}

// CheckpointMemory writes images that RestoreMemory checks for.
func (r *fakeRuntime) CheckpointMemory(ctx context.Context, h *criu.Host, id string, _ *runtime.Info, _ *image.Image, dir string) error {
	r.mu.Lock()
	err, hook := r.checkpointErr, r.checkpointHook
	r.mu.Unlock()
	if hook != nil {
		if err := hook(ctx); err != nil {
			return err
		}
	}
	if h == nil {
		return errors.New("fake runtime: checkpoint without CRIU")
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "inventory.img"), []byte(id), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "pages-1.img"), []byte("memory of "+id), 0o644)
}

func (r *fakeRuntime) RestoreMemory(_ context.Context, h *criu.Host, spec runtime.Spec, criuDir string) (*runtime.Info, error) {
	r.mu.Lock()
	hook, after := r.restoreHook, r.afterRestore
	r.restores = append(r.restores, criuDir)
	r.specs[spec.ID] = spec
	r.mu.Unlock()
	if h == nil {
		return nil, errors.New("fake runtime: restore without CRIU")
	}
	if _, serr := os.Stat(filepath.Join(criuDir, "inventory.img")); serr != nil {
		return nil, fmt.Errorf("fake runtime: no images to restore: %w", serr)
	}
	if hook != nil {
		if err := hook(spec); err != nil {
			return nil, err
		}
	}
	info, err := r.spawn(spec.ID)
	if err != nil {
		return nil, err
	}
	if after != nil {
		after(spec.ID)
	}
	return info, nil
}

// fakeAgent answers the agent calls the Manager makes, with the agent's
// wire types.
type fakeAgent struct {
	id  string
	gen int // which spawn: a restored sandbox has a new agent
	// frozen: the sandbox's cgroup is frozen, so the agent answers
	// nothing until thawed (or the caller gives up).
	frozen func() bool

	mu        sync.Mutex
	execs     int
	prestarts []string
	files     map[string][]byte
}

func (a *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for a.frozen != nil && a.frozen() {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /healthz":
		w.Write([]byte("ok\n"))
	case "POST /exec":
		var req wire.ExecRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			a.fail(w, errdefs.InvalidArgument("decode exec request: %v", err))
			return
		}
		a.mu.Lock()
		a.execs++
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		enc.Encode(wire.ExecEvent{Started: true})
		enc.Encode(wire.ExecEvent{Stream: "stdout", Data: []byte(strings.Join(append([]string{req.Cmd}, req.Args...), " ") + "\n")})
		enc.Encode(wire.ExecEvent{Stream: "stderr", Data: []byte(fmt.Sprintf("%s#%d\n", a.id, a.gen))})
		enc.Encode(wire.ExecEvent{Exit: &wire.ExitStatus{Code: 0, DurationMS: 1}})
	case "PUT /files":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			a.fail(w, err)
			return
		}
		p := r.URL.Query().Get("path")
		a.mu.Lock()
		a.files[p] = b
		a.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"path": p, "size": len(b)})
	case "GET /files":
		a.mu.Lock()
		b, ok := a.files[r.URL.Query().Get("path")]
		a.mu.Unlock()
		if !ok {
			a.fail(w, errdefs.NotFound("%s: no such file", r.URL.Query().Get("path")))
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	case "GET /contexts":
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("[]\n"))
	case "POST /contexts/prestart":
		var req wire.PrestartRequest
		json.NewDecoder(r.Body).Decode(&req)
		a.mu.Lock()
		a.prestarts = append(a.prestarts, req.Language)
		a.mu.Unlock()
		w.Write([]byte("{}\n"))
	default:
		a.fail(w, errdefs.NotFound("fake agent: no %s %s", r.Method, r.URL.Path))
	}
}

// fail answers err as the real agent does (writeError in internal/agent/server).
func (a *fakeAgent) fail(w http.ResponseWriter, err error) {
	status, code := errdefs.HTTPStatus(err)
	var body wire.ErrorBody
	body.Error.Code, body.Error.Message = code, err.Error()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

func (a *fakeAgent) prestarted() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.prestarts...)
}

// fakeClock is the Manager's clock, moved by tests (idle timeouts).
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// testEnv is a Manager wired as the daemon wires one (sandbox.New, store,
// snapshot store, CRIU, lock wait), over the fakes.
type testEnv struct {
	t       *testing.T
	ctx     context.Context
	m       *Manager
	st      store.Store
	rt      *fakeRuntime
	snaps   *snapshot.Store
	snapDir string
	clock   *fakeClock
	started bool
}

type envOpts struct {
	node        string
	noCRIU      bool
	quotas      QuotaSource
	defaultPool int
}

func newEnv(t *testing.T, o envOpts) *testEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.OpenSQLite(ctx, filepath.Join(dir, "forkbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	snapDir := filepath.Join(dir, "snapshots")
	snaps, err := snapshot.Open(snapDir)
	if err != nil {
		t.Fatal(err)
	}
	rt := newFakeRuntime(t)
	imgs := &fakeImages{imgs: []*image.Image{
		{Name: image.DefaultImage, ID: "sha256:python-1"},
		{Name: "node", ID: "sha256:node-1"},
	}}
	m := New(st, rt, imgs, snaps, DefaultDefaults, slog.New(slog.DiscardHandler))
	e := &testEnv{t: t, ctx: ctx, m: m, st: st, rt: rt, snaps: snaps, snapDir: snapDir, clock: &fakeClock{}}
	m.now = e.clock.now
	// A host that bounds nothing: the tests do not depend on this
	// machine's memory, CPUs or disk (hostlimits_test.go covers those).
	fakeHost(m, HostInfo{}, nil)
	m.SetLockWait(5 * time.Second)
	if o.noCRIU {
		m.SetCRIU(nil, "no CRIU in unit tests")
	} else {
		m.SetCRIU(&criu.Host{Usable: true}, "")
	}
	if o.node != "" {
		m.SetNode(o.node)
	}
	if o.quotas != nil {
		m.SetQuotaSource(o.quotas)
	}
	if err := m.SetDefaultPool(o.defaultPool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if e.started {
			m.Close()
		}
		st.Close()
	})
	return e
}

// start runs the Manager's Start (reconcile, pools, reaper).
func (e *testEnv) start() {
	e.t.Helper()
	if err := e.m.Start(e.ctx); err != nil {
		e.t.Fatalf("start: %v", err)
	}
	e.started = true
	e.waitSettled()
}

// waitSettled waits until the Manager has settled what its start found.
func (e *testEnv) waitSettled() {
	e.t.Helper()
	select {
	case <-e.m.Settled():
	case <-time.After(30 * time.Second):
		e.t.Fatal("the Manager did not settle the sandboxes its start found within 30s")
	}
}

// startedEnv is a started Manager with default options.
func startedEnv(t *testing.T) *testEnv {
	e := newEnv(t, envOpts{})
	e.start()
	return e
}

func (e *testEnv) create(req *api.CreateSandboxRequest) *api.Sandbox {
	e.t.Helper()
	sb, err := e.m.Create(e.ctx, req)
	if err != nil {
		e.t.Fatalf("create %+v: %v", req, err)
	}
	return sb
}

func (e *testEnv) row(ref string) *store.Sandbox {
	e.t.Helper()
	return rowOf(e.t, e.st, ref)
}

// seed writes a record as a previous daemon (or another node) left it; live
// gives it "processes" in the fake runtime.
func (e *testEnv) seed(sb *store.Sandbox, live bool) *store.Sandbox {
	e.t.Helper()
	if live {
		info, err := e.rt.spawn(sb.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		sb.Runtime = runtime.MarshalInfo(info)
	}
	if sb.Image == "" {
		sb.Image = image.DefaultImage
	}
	if sb.Spec.MemoryMB == 0 {
		sb.Spec = store.Spec{CPUs: 1, MemoryMB: 1024, DiskMB: 2048, PIDsLimit: 512, TimeoutSecs: 300}
	}
	now := e.clock.now().UTC()
	sb.CreatedAt, sb.LastActiveAt = now, now
	if err := e.st.Create(e.ctx, sb); err != nil {
		e.t.Fatal(err)
	}
	return sb
}

// seedSuspendImage records a committed suspend image of sandbox id with
// images RestoreMemory accepts, as a suspend would have left it.
func (e *testEnv) seedSuspendImage(id string) string {
	e.t.Helper()
	snapID := newID("snap_")
	p, err := e.snaps.Begin(snapID)
	if err != nil {
		e.t.Fatal(err)
	}
	criuDir := filepath.Join(p.Dir(), criuDirName)
	if err := os.Mkdir(criuDir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := e.rt.CheckpointMemory(e.ctx, &criu.Host{Usable: true}, id, nil, nil, criuDir); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.Dir(), fsArchive), []byte("fs"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	size, sum, err := p.Commit()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.st.CreateSnapshot(e.ctx, &store.Snapshot{ID: snapID, Type: snapshotSuspend, SandboxID: id, Image: image.DefaultImage,
		SizeBytes: size, Checksum: sum, CreatedAt: e.clock.now().UTC()}); err != nil {
		e.t.Fatal(err)
	}
	return snapID
}

// exec runs a command in sandbox ref and returns what the agent answered
// (its id and spawn on stderr).
func (e *testEnv) exec(ref string) (*api.ExecResult, error) {
	return e.m.Exec(e.ctx, ref, &api.ExecRequest{Cmd: "echo", Args: []string{"hi"}}, ExecOptions{})
}

// transitionsOf lists a sandbox's recorded state changes as "from>to".
func (e *testEnv) transitionsOf(id string) []string {
	e.t.Helper()
	evs, err := e.st.Events(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, string(ev.From+">"+ev.To))
	}
	return out
}

// snapshotExists reports whether snapshot id has a record or files.
func (e *testEnv) snapshotExists(id string) (record, files bool) {
	_, err := e.st.GetSnapshot(e.ctx, id)
	record = err == nil
	_, serr := os.Stat(e.snaps.Path(id))
	return record, serr == nil
}

// eventually polls cond until it holds, for work the Manager does in the
// background (pool refills, the reaper); it fails the test after a generous
// bound, and asserts nothing about how long it took.
func (e *testEnv) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantKind fails unless err is of errdefs kind.
func wantKind(t *testing.T, what string, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("%s: err = %v; want %v", what, err, kind)
	}
}
