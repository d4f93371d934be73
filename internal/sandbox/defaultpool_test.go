package sandbox

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

// TestDefaultPoolFits: only a request that a ready member of the default
// pool (default image and resources, no env, no network, the default
// tenant) could have come from is served by it.
func TestDefaultPoolFits(t *testing.T) {
	m := &Manager{defaults: DefaultDefaults, defPool: &pool{}}
	ctx := context.Background()
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	yes := []api.CreateSandboxRequest{
		{},
		{Name: "alice", Labels: map[string]string{"team": "x"}, TimeoutSecs: i(60), MaxLifetimeSecs: i(600), SuspendOnIdle: true},
		{Image: image.DefaultImage, CPUs: f(DefaultDefaults.CPUs), MemoryMB: i(DefaultDefaults.MemoryMB)},
	}
	for _, req := range yes {
		if !m.defaultPoolFits(ctx, &req) {
			t.Errorf("%+v: not served by the default pool", req)
		}
	}
	no := map[string]api.CreateSandboxRequest{
		"env":       {Env: map[string]string{"A": "1"}},
		"image":     {Image: "other"},
		"snapshot":  {SnapshotID: "snap_x"},
		"pool":      {Pool: "analysts"},
		"internet":  {AllowInternetAccess: true},
		"network":   {Network: &api.NetworkPolicy{}},
		"cpus":      {CPUs: f(0.5)},
		"memory":    {MemoryMB: i(512)},
		"disk":      {DiskMB: i(512)},
		"pids":      {PIDsLimit: i(64)},
		"elsewhere": {Node: "b"},
	}
	for why, req := range no {
		if m.defaultPoolFits(ctx, &req) {
			t.Errorf("%s: served by the default pool", why)
		}
	}
	acme := tenant.With(ctx, tenant.Principal{Tenant: "acme"})
	if m.defaultPoolFits(acme, &api.CreateSandboxRequest{}) {
		t.Error("another tenant's request was served by the default pool")
	}
	if (&Manager{defaults: DefaultDefaults}).defaultPoolFits(ctx, &api.CreateSandboxRequest{}) {
		t.Error("served with the pool off")
	}
}

// TestPoolLabelsReserved: no request may label a sandbox as a pool's.
func TestPoolLabelsReserved(t *testing.T) {
	m := &Manager{defaults: DefaultDefaults}
	for _, k := range []string{PoolLabel, PoolReadyLabel, PoolImageLabel} {
		_, err := m.validate(&api.CreateSandboxRequest{Labels: map[string]string{k: DefaultPoolName}})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("label %s: %v, want invalid_argument", k, err)
		}
	}
	if !hiddenMember(&store.Sandbox{Spec: store.Spec{Labels: map[string]string{PoolLabel: DefaultPoolName, PoolReadyLabel: "true"}}}) ||
		hiddenMember(&store.Sandbox{Spec: store.Spec{Labels: map[string]string{PoolLabel: "analysts", PoolReadyLabel: "true"}}}) {
		t.Error("hiddenMember")
	}
}

// TestStateTimesFromCreation: time before a sandbox's creation (a default
// pool's sandbox waiting to be handed out) is not its running time.
func TestStateTimesFromCreation(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "forkbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clock := time.Now().UTC() // the store stamps events with its own clock
	sb := &store.Sandbox{ID: "sbx_a", State: api.StateCreating, Image: "python", CreatedAt: clock, LastActiveAt: clock}
	if err := st.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Update(ctx, sb.ID, func(s *store.Sandbox) error { s.State = api.StateRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	m := &Manager{store: st, now: func() time.Time { return clock.Add(100 * time.Second) }}
	if run, _ := m.stateTimes(sb); run < 99 || run > 100 {
		t.Fatalf("running seconds %v, want 100", run)
	}
	sb.CreatedAt = clock.Add(90 * time.Second) // handed out then
	if run, _ := m.stateTimes(sb); run != 10 {
		t.Fatalf("running seconds after a hand-out %v, want 10", run)
	}
}
