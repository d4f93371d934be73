package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// poolReady is how many ready sandboxes pool name holds.
func (e *testEnv) poolReady(name string) int {
	pools, err := e.m.ListPools(e.ctx, PoolListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range pools {
		if p.Name == name {
			return p.Ready
		}
	}
	e.t.Fatalf("no pool %s", name)
	return 0
}

// readyRows are the running rows labelled ready for pool name.
func (e *testEnv) readyRows(name string) []string {
	e.t.Helper()
	list, err := e.st.List(tenant.Unscoped(e.ctx), store.ListFilter{State: api.StateRunning,
		Labels: map[string]string{PoolLabel: name, PoolReadyLabel: "true"}})
	if err != nil {
		e.t.Fatal(err)
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.ID)
	}
	return ids
}

// A pool fills itself, hands out its oldest ready sandbox renamed and
// relabelled as the request's, and refills.
func TestPoolHandOutAndRefill(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	p, err := e.m.CreatePool(e.ctx, &api.CreatePoolRequest{Name: "analysts", Image: "python", Size: 2})
	if err != nil || p.Size != 2 || p.Image != "python" {
		t.Fatalf("create pool: %+v, %v", p, err)
	}
	e.eventually("the pool filled", func() bool { return e.poolReady("analysts") == 2 })
	ready := e.readyRows("analysts")
	if len(ready) != 2 || e.rt.createCount() != 2 {
		t.Fatalf("ready rows %v, %d creates", ready, e.rt.createCount())
	}

	sb := e.create(&api.CreateSandboxRequest{Pool: "analysts", Name: "alice", Labels: map[string]string{"team": "x"}})
	if !slices.Contains(ready, sb.ID) || sb.Name != "alice" || len(sb.Labels) != 1 || sb.Labels["team"] != "x" {
		t.Fatalf("handed out %+v (ready %v)", sb, ready)
	}
	if h := e.rt.hostname(sb.ID); h != "alice" {
		t.Fatalf("hostname %q", h)
	}
	if _, err := e.exec("alice"); err != nil {
		t.Fatal(err)
	}
	e.eventually("the pool refilled", func() bool { return e.poolReady("analysts") == 2 })
	if n := e.rt.createCount(); n != 3 {
		t.Fatalf("%d creates; want 3 (2 to fill, 1 to refill)", n)
	}
	if slices.Contains(e.readyRows("analysts"), sb.ID) {
		t.Fatal("the handed-out sandbox is still ready")
	}

	// A request that is wrong itself (a name in use) gives the sandbox back.
	e.create(&api.CreateSandboxRequest{Name: "bob"})
	before := e.readyRows("analysts")
	_, err = e.m.Create(e.ctx, &api.CreateSandboxRequest{Pool: "analysts", Name: "bob"})
	wantKind(t, "a hand-out under a name in use", err, errdefs.ErrConflict)
	if after := e.readyRows("analysts"); len(after) != 2 || e.poolReady("analysts") != 2 {
		t.Fatalf("ready after the refused hand-out: %v (before %v)", after, before)
	}
	for _, id := range before {
		if h := e.rt.hostname(id); h != "" && h != id {
			t.Fatalf("ready sandbox %s kept hostname %q", id, h)
		}
	}

	// Delete: its ready sandboxes end with it.
	if err := e.m.DeletePool(e.ctx, "analysts"); err != nil {
		t.Fatal(err)
	}
	for _, id := range before {
		if sb := e.row(id); sb.State != api.StateTerminated || sb.StateReason != "pool deleted" {
			t.Fatalf("ready sandbox of a deleted pool: %s (%s)", sb.State, sb.StateReason)
		}
	}
	if pools, _ := e.m.ListPools(e.ctx, PoolListOptions{}); len(pools) != 0 {
		t.Fatal("pool listed after delete")
	}
	_, err = e.m.Create(e.ctx, &api.CreateSandboxRequest{Pool: "analysts"})
	wantKind(t, "create from a deleted pool", err, errdefs.ErrNotFound)
	wantKind(t, "delete again", e.m.DeletePool(e.ctx, "analysts"), errdefs.ErrNotFound)
	if e.row("alice").State != api.StateRunning {
		t.Fatal("the handed-out sandbox ended with its pool")
	}
}

// A ready sandbox that died is skipped (and ended); an empty pool creates
// from its source.
func TestPoolUnusableAndEmpty(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	if _, err := e.m.CreatePool(e.ctx, &api.CreatePoolRequest{Name: "p", Image: "python", Size: 2}); err != nil {
		t.Fatal(err)
	}
	e.eventually("the pool filled", func() bool { return e.poolReady("p") == 2 })
	// Refills wait from here on, so the pool empties.
	release := make(chan struct{})
	e.rt.set(func(r *fakeRuntime) {
		r.createHook = func(ctx context.Context, spec runtime.Spec) error {
			if strings.HasPrefix(spec.Hostname, "sbx_") { // a pool's: unnamed
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}
	})
	ready := e.readyRows("p")
	slices.Sort(ready)
	e.m.OnExit(ready[0], "init exited")
	e.m.OnExit(ready[1], "init exited")
	sb := e.create(&api.CreateSandboxRequest{Pool: "p", Name: "carol"})
	if slices.Contains(ready, sb.ID) || sb.State != api.StateRunning || len(sb.Labels) != 0 {
		t.Fatalf("from an empty pool: %+v", sb)
	}
	if h := e.rt.spec(sb.ID).Hostname; h != "carol" {
		t.Fatalf("the empty pool's request was not started as its own: hostname %q", h)
	}
	for _, id := range ready {
		e.eventually("the dead ready sandbox "+id+" is ended", func() bool {
			s := e.row(id)
			return s.State == api.StateTerminated && s.StateReason == "unusable pool sandbox"
		})
	}
	// The refills that waited fill the pool again.
	close(release)
	e.eventually("the pool refilled", func() bool { return e.poolReady("p") == 2 })
}

// CreatePool refuses what it cannot fill.
func TestPoolRefusals(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	for what, req := range map[string]api.CreatePoolRequest{
		"bad name":       {Name: "Bad Name", Image: "python", Size: 1},
		"size 0":         {Name: "p", Image: "python", Size: 0},
		"too big":        {Name: "p", Image: "python", Size: maxPoolSize + 1},
		"two sources":    {Name: "p", Image: "python", SnapshotID: "snap_x", Size: 1},
		"no source":      {Name: "p", Size: 1},
		"a bad image":    {Name: "p", Image: "Bad!", Size: 1},
		"a suspend snap": {Name: "p", SnapshotID: "snap_nonesuch", Size: 1},
	} {
		_, err := e.m.CreatePool(e.ctx, &req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s: %v", what, err)
		}
	}
	_, err := e.m.CreatePool(e.ctx, &api.CreatePoolRequest{Name: "p", Image: "nonesuch", Size: 1})
	wantKind(t, "unknown image", err, errdefs.ErrNotFound)
	if _, err := e.m.CreatePool(e.ctx, &api.CreatePoolRequest{Name: "p", Image: "python", Size: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.CreatePool(e.ctx, &api.CreatePoolRequest{Name: "p", Image: "python", Size: 1})
	wantKind(t, "a second pool p", err, errdefs.ErrConflict)
	_, err = e.m.Create(e.ctx, &api.CreateSandboxRequest{Pool: "p", Image: "python"})
	wantKind(t, "a pool create naming an image", err, errdefs.ErrInvalidArgument)
	_, err = e.m.Create(e.ctx, &api.CreateSandboxRequest{Labels: map[string]string{PoolLabel: "p"}})
	wantKind(t, "a create with a pool's label", err, errdefs.ErrInvalidArgument)
	e.eventually("the pool filled", func() bool { return e.poolReady("p") == 1 })
}

// A pool of a memory snapshot fills with restores of it.
func TestPoolOfASnapshot(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	id := e.create(&api.CreateSandboxRequest{Name: "golden"}).ID
	sn, err := e.m.Checkpoint(e.ctx, id, &api.CheckpointRequest{Type: api.SnapshotMemory})
	if err != nil {
		t.Fatal(err)
	}
	restores := e.rt.restoreCount()
	p, err := e.m.CreatePool(e.ctx, &api.CreatePoolRequest{Name: "warm", SnapshotID: sn.ID, Size: 1})
	if err != nil || p.SnapshotID != sn.ID || p.Image != "python" {
		t.Fatalf("pool: %+v, %v", p, err)
	}
	e.eventually("the pool filled", func() bool { return e.poolReady("warm") == 1 })
	if e.rt.restoreCount() != restores+1 {
		t.Fatalf("%d restores for the pool", e.rt.restoreCount()-restores)
	}
	sb := e.create(&api.CreateSandboxRequest{Pool: "warm"})
	if sb.SnapshotID != sn.ID {
		t.Fatalf("handed out %+v", sb)
	}
}

// The default pool keeps members with their kernel started, hidden until
// handed out to a plain create of the default tenant.
func TestDefaultPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{defaultPool: 1})
	e.start()
	var member string
	e.eventually("the default pool filled", func() bool {
		ids := e.readyRows(DefaultPoolName)
		if len(ids) == 1 && e.m.findLive(ids[0]) != nil {
			member = ids[0]
		}
		return member != ""
	})
	e.eventually("its kernel started", func() bool {
		b := e.rt.box(member)
		return b != nil && slices.Equal(b.agent.prestarted(), []string{"python"})
	})
	e.eventually("the member is ready", func() bool {
		p := e.m.defaultPool()
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.ready) == 1
	})
	_, err := e.m.Get(e.ctx, member)
	wantKind(t, "get of a hidden member", err, errdefs.ErrNotFound)
	if list, _ := e.m.List(e.ctx, store.ListFilter{}); len(list) != 0 {
		t.Fatalf("members listed: %+v", list)
	}
	// Not served: another tenant's request, or one with env.
	other := e.create(&api.CreateSandboxRequest{Env: map[string]string{"A": "1"}})
	acme := tenant.With(e.ctx, tenant.Principal{Tenant: "acme"})
	theirs, err := e.m.Create(acme, &api.CreateSandboxRequest{})
	if err != nil || other.ID == member || theirs.ID == member {
		t.Fatalf("served from the default pool: %s %s (member %s), %v", other.ID, theirs.ID, member, err)
	}
	// Served: a plain create, as if new.
	sb := e.create(&api.CreateSandboxRequest{Name: "dave"})
	if sb.ID != member || sb.Name != "dave" || len(sb.Labels) != 0 {
		t.Fatalf("plain create: %+v (member %s)", sb, member)
	}
	if _, err := e.m.Get(e.ctx, "dave"); err != nil {
		t.Fatalf("get of the handed-out member: %v", err)
	}
	e.eventually("the default pool refilled", func() bool {
		ids := e.readyRows(DefaultPoolName)
		return len(ids) == 1 && ids[0] != member
	})
}

// Quotas refuse starts, suspends, snapshots and pools beyond them, with
// the quota's numbers, and change nothing.
func TestQuotaRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{quotas: fixedQuotas{tenant.Default: {RunningSandboxes: i64p(1), SnapshotBytes: i64p(0)}}})
	e.start()
	a := e.create(&api.CreateSandboxRequest{Name: "a"}).ID
	creates := e.rt.createCount()
	_, err := e.m.Create(e.ctx, &api.CreateSandboxRequest{Name: "b"})
	wantQuota(t, "a second running sandbox", err, api.QuotaRunningSandboxes, 1, 1, 1)
	if _, gerr := e.st.Get(e.ctx, "b"); !errors.Is(gerr, errdefs.ErrNotFound) || e.rt.createCount() != creates {
		t.Fatalf("a refused create left a row (%v) or ran (%d creates)", gerr, e.rt.createCount()-creates)
	}
	_, err = e.m.CreatePool(e.ctx, &api.CreatePoolRequest{Name: "p", Image: "python", Size: 1})
	wantQuota(t, "a pool", err, api.QuotaRunningSandboxes, 1, 1, 1)
	_, err = e.m.Checkpoint(e.ctx, a, &api.CheckpointRequest{})
	wantQuota(t, "a snapshot", err, api.QuotaSnapshotBytes, 0, 1, 0)
	_, err = e.m.Fork(e.ctx, a, &api.ForkRequest{Count: 1})
	wantQuota(t, "a fork", err, api.QuotaSnapshotBytes, 0, 1, 0)

	// Suspended, a counts no more: b starts, and then a cannot resume.
	if _, err := e.m.Suspend(e.ctx, a, "test"); err != nil {
		t.Fatal(err)
	}
	e.create(&api.CreateSandboxRequest{Name: "b"})
	_, err = e.m.Resume(e.ctx, a)
	wantQuota(t, "a resume", err, api.QuotaRunningSandboxes, 1, 1, 1)
	if !strings.Contains(err.Error(), "stays suspended") || e.row(a).State != api.StateSuspended {
		t.Fatalf("resume: %v, state %s", err, e.row(a).State)
	}
	_, err = e.exec(a)
	wantKind(t, "a call that would resume", err, errdefs.ErrResourceExhausted)
	u, err := e.m.Usage(e.ctx, tenant.Default)
	if err != nil || u.RunningSandboxes != 1 || u.SuspendedSandboxes != 1 {
		t.Fatalf("usage: %+v, %v", u, err)
	}
}

// The suspended_sandboxes quota refuses a user's suspend; the sandbox
// stays running, untouched.
func TestSuspendQuota(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{quotas: fixedQuotas{tenant.Default: {SuspendedSandboxes: i64p(0)}}})
	e.start()
	id := e.create(&api.CreateSandboxRequest{Name: "s"}).ID
	_, err := e.m.Suspend(e.ctx, id, "test")
	wantQuota(t, "a suspend", err, api.QuotaSuspendedSandboxes, 0, 1, 0)
	if sb := e.row(id); sb.State != api.StateRunning || sb.StateReason != "" || len(e.transitionsOf(id)) != 2 {
		t.Fatalf("after the refusal: %s (%s) %v", sb.State, sb.StateReason, e.transitionsOf(id))
	}
	// The daemon's own suspend at exit frees what it holds: not refused.
	if rep := e.m.Shutdown(e.ctx, OnExitSuspend); rep.Suspended != 1 {
		t.Fatalf("shutdown: %s %v", rep, rep.Failed)
	}
}

// A restart trims what a previous daemon left ready to the pools' sizes
// now (oldest kept), ends ready sandboxes whose pool is gone, and lists
// the members (the default pool's too, for admins) so they can be seen
// and removed.
func TestStartTrimsAndListsPoolMembers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{defaultPool: 1})
	if err := e.st.CreatePool(e.ctx, &store.Pool{Tenant: tenant.Default, Name: "p", Image: "python", Size: 1, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	seedReady := func(id, pool string, state api.SandboxState, live bool) {
		labels := map[string]string{PoolLabel: pool, PoolReadyLabel: "true"}
		e.seed(&store.Sandbox{ID: id, State: state, Spec: store.Spec{MemoryMB: 1024, CPUs: 1, TimeoutSecs: 300, Labels: labels}}, live)
		e.clock.advance(time.Second) // oldest first
	}
	seedReady("sbx_p_old", "p", api.StateRunning, true)
	seedReady("sbx_p_new", "p", api.StateRunning, true)
	seedReady("sbx_gone_pool", "q", api.StateRunning, true)
	seedReady("sbx_def_old", DefaultPoolName, api.StateRunning, true)
	seedReady("sbx_def_new", DefaultPoolName, api.StateRunning, true)
	seedReady("sbx_def_err", DefaultPoolName, api.StateError, false)
	e.start()
	for id, want := range map[string]api.SandboxState{
		"sbx_p_old": api.StateRunning, "sbx_p_new": api.StateTerminated, "sbx_gone_pool": api.StateTerminated,
		"sbx_def_old": api.StateRunning, "sbx_def_new": api.StateTerminated, "sbx_def_err": api.StateTerminated,
	} {
		if got := e.row(id).State; got != want {
			t.Errorf("%s: %s (%s); want %s", id, got, e.row(id).StateReason, want)
		}
	}
	// A tenant's listing: its pools, members on request.
	plain, err := e.m.ListPools(e.ctx, PoolListOptions{})
	if err != nil || len(plain) != 1 || plain[0].Members != nil {
		t.Fatalf("pools without members: %+v %v", plain, err)
	}
	admin, err := e.m.ListPools(e.ctx, PoolListOptions{Members: true, DefaultPool: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, p := range admin {
		for _, sb := range p.Members {
			got[p.Name] = append(got[p.Name], sb.ID+":"+string(sb.State))
		}
	}
	want := map[string][]string{"p": {"sbx_p_old:running"}, DefaultPoolName: {"sbx_def_old:running"}}
	if len(admin) != 2 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("members: %v (%d pools); want %v", got, len(admin), want)
	}
	// A member can be removed by its id; its pool refills.
	if _, err := e.m.Delete(e.ctx, "sbx_def_old"); err != nil {
		t.Fatalf("delete a default pool member: %v", err)
	}
	e.eventually("the default pool refilled", func() bool {
		pools, err := e.m.ListPools(e.ctx, PoolListOptions{Members: true, DefaultPool: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pools {
			if p.Name == DefaultPoolName {
				return p.Ready == 1 && len(p.Members) == 1 && p.Members[0].ID != "sbx_def_old"
			}
		}
		return false
	})
}
