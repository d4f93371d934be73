package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/forkbox/forkbox/internal/tenant"
)

type fixedQuotas map[string]api.Quotas

func (f fixedQuotas) Quotas(_ context.Context, t string) (api.Quotas, error) { return f[t], nil }

func i64p(v int64) *int64     { return &v }
func f64p(v float64) *float64 { return &v }

func wantQuota(t *testing.T, what string, err error, quota api.QuotaName, use, requested, limit float64) {
	t.Helper()
	var qe *QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("%s: err = %v; want a %s quota error", what, err, quota)
	}
	if qe.Quota != quota || qe.Use != use || qe.Requested != requested || qe.Limit != limit {
		t.Fatalf("%s: %+v; want %s use %g + %g > %g", what, qe.QuotaExceeded, quota, use, requested, limit)
	}
}

// Quotas count each tenant's own rows, the starts under way included, and
// say which quota with its numbers.
func TestQuotas(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "forkbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := &Manager{store: st, defaults: DefaultDefaults, log: slog.Default()}
	m.SetQuotaSource(fixedQuotas{
		"acme":   {RunningSandboxes: i64p(3), MemoryMB: i64p(2048), CPUs: f64p(2), SuspendedSandboxes: i64p(1), SnapshotBytes: i64p(1000)},
		"globex": {},
	})
	now := time.Now()
	for _, sb := range []*store.Sandbox{
		{ID: "a1", Tenant: "acme", State: api.StateRunning, Spec: store.Spec{MemoryMB: 1024, CPUs: 1}},
		{ID: "a2", Tenant: "acme", State: api.StateSuspended, Spec: store.Spec{MemoryMB: 1024, CPUs: 1}},
		{ID: "a3", Tenant: "acme", State: api.StateTerminated, Spec: store.Spec{MemoryMB: 4096, CPUs: 4}},
		{ID: "g1", Tenant: "globex", State: api.StateRunning, Spec: store.Spec{MemoryMB: 8192, CPUs: 8}},
	} {
		sb.CreatedAt, sb.LastActiveAt = now, now
		if err := st.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CreateSnapshot(ctx, &store.Snapshot{ID: "s1", Tenant: "acme", Type: "memory", SizeBytes: 1200, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	u, err := m.Usage(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if u.RunningSandboxes != 1 || u.MemoryMB != 1024 || u.CPUs != 1 || u.SuspendedSandboxes != 1 || u.SnapshotBytes != 1200 ||
		u.Quotas.RunningSandboxes == nil || *u.Quotas.RunningSandboxes != 3 {
		t.Fatalf("acme usage: %+v", u)
	}

	// 1024 MiB of 2048 used: a start of 1024 fits, and while it is under
	// way (not yet in the store) a second one does not.
	spec := store.Spec{MemoryMB: 1024, CPUs: 0.5}
	rel, err := m.admitQuota(ctx, "acme", "a4", spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.admitQuota(ctx, "acme", "a5", spec)
	wantQuota(t, "a second start beside the first", err, api.QuotaMemoryMB, 2048, 1024, 2048)
	rel()
	// Concurrent starts: of 4 at once with room for 1 (memory), exactly 1.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var admitted []func()
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if r, err := m.admitQuota(ctx, "acme", "c"+string(rune('0'+i)), spec); err == nil {
				mu.Lock()
				admitted = append(admitted, r)
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if len(admitted) != 1 {
		t.Fatalf("%d of 4 concurrent starts admitted; want 1", len(admitted))
	}
	admitted[0]()
	// A resume does not count itself twice (it is in the store already).
	if rel, err := m.admitQuota(ctx, "acme", "a2", store.Spec{MemoryMB: 1024, CPUs: 1}); err != nil {
		t.Fatalf("resume of a2: %v", err)
	} else {
		rel()
	}
	// CPUs: 1 of 2 used.
	_, err = m.admitQuota(ctx, "acme", "a6", store.Spec{MemoryMB: 1, CPUs: 1.5})
	wantQuota(t, "cpus", err, api.QuotaCPUs, 1, 1.5, 2)
	// A fork of 3 branches: 1 running + 3 > 3.
	a1, _ := st.Get(ctx, "a1")
	err = m.checkForkQuota(ctx, a1, 3)
	wantQuota(t, "snapshot bytes before a fork", err, api.QuotaSnapshotBytes, 1200, 1, 1000)
	if err := st.DeleteSnapshot(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	err = m.checkForkQuota(ctx, a1, 3)
	wantQuota(t, "a fork of 3", err, api.QuotaRunningSandboxes, 1, 3, 3)
	if err := m.checkForkQuota(ctx, &store.Sandbox{ID: "a1", Tenant: "acme", Spec: store.Spec{MemoryMB: 256, CPUs: 0.25}}, 2); err != nil {
		t.Fatalf("a fork of 2 small branches: %v", err)
	}
	// Suspended sessions: 1 of 1.
	wantQuota(t, "a second suspended session", m.checkSuspendQuota(ctx, "acme"), api.QuotaSuspendedSandboxes, 1, 1, 1)
	// globex has no quotas: anything goes, and acme's limits are not its.
	if rel, err := m.admitQuota(ctx, "globex", "g2", store.Spec{MemoryMB: 1 << 20, CPUs: 64}); err != nil {
		t.Fatalf("globex without quotas: %v", err)
	} else {
		rel()
	}
	// A tenant-scoped context does not narrow the usage of another tenant
	// asked for by name (the admin's view).
	if u, err := m.Usage(tenant.With(ctx, tenant.Principal{Tenant: "globex"}), "acme"); err != nil || u.RunningSandboxes != 1 {
		t.Fatalf("acme usage from globex's context: %+v %v", u, err)
	}
}

// fakeImages is an image store of fixed images and layers.
type fakeImages struct {
	imgs   []*image.Image
	layers map[string]int64
}

func (f *fakeImages) Get(_ context.Context, name string) (*image.Image, error) {
	for _, img := range f.imgs {
		if img.Name == name {
			return img, nil
		}
	}
	return nil, errdefs.NotFound("image %q not found", name)
}

func (f *fakeImages) List(context.Context) ([]*image.Image, error) { return f.imgs, nil }

func (f *fakeImages) Remove(context.Context, string, func(*image.Image) error) error { return nil }

func (f *fakeImages) GetLayer(id string) (*image.Layer, error) {
	return &image.Layer{ID: id, SizeBytes: f.layers[id]}, nil
}

// A tenant's image bytes are its own layers, once each, not the catalog's
// it builds on.
func TestImageBytes(t *testing.T) {
	ctx := context.Background()
	m := &Manager{images: &fakeImages{
		imgs: []*image.Image{
			{Name: "python", Layers: []string{"base", "py"}, SizeBytes: 1000},
			{Name: "acme+tools", Layers: []string{"base", "py", "tools"}, SizeBytes: 1010},
			{Name: "acme+more", Layers: []string{"base", "py", "tools", "more"}, SizeBytes: 1015},
			{Name: "globex+x", Layers: []string{"base", "x"}, SizeBytes: 907},
		},
		layers: map[string]int64{"base": 900, "py": 100, "tools": 10, "more": 5, "x": 7},
	}}
	for tn, want := range map[string]int64{"acme": 15, "globex": 7, tenant.Default: 1000, "nobody": 0} {
		if got, err := m.imageBytes(ctx, tn); err != nil || got != want {
			t.Errorf("imageBytes(%s) = %d, %v; want %d", tn, got, err, want)
		}
	}
}
