package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/runtime"
	"github.com/forkbox/forkbox/internal/store"
)

// reviewHost is the host of the review (issue 13): 2 CPUs, 24 GiB, whose
// file table one sandbox filled.
var reviewHost = HostInfo{
	FileMax: 2466112, NrOpen: 1048576, NoFileHard: 20000, PIDMax: 32768, ThreadsMax: 192725,
	MemTotalMB: 24105, CPUs: 2, DiskTotalMB: 258048, DiskFreeMB: 71680,
}

func TestComputeBoundsOnTheReviewHost(t *testing.T) {
	b := ComputeBounds(reviewHost)
	// A quarter of the file table; pids_limit bounded by it at 256 files
	// each (2408), well under a quarter of pid_max (8192).
	if b.Files != 616528 || b.PIDs != 2408 {
		t.Fatalf("files %d, pids %d; want 616528, 2408", b.Files, b.PIDs)
	}
	if b.MemReserveMB != 1506 || b.MemoryMB != 22599 || b.CPUs != 2 || b.DiskReserveMB != 12902 {
		t.Fatalf("memory %d (reserve %d), cpus %v, disk reserve %d", b.MemoryMB, b.MemReserveMB, b.CPUs, b.DiskReserveMB)
	}
	for _, c := range []struct{ pids, nofile int64 }{
		{512, 1204},   // the default pids_limit: about the usual 1024
		{2408, 256},   // the largest: the floor
		{16, 20000},   // the smallest: capped by the daemon's own hard limit
		{100000, 256}, // beyond the bound (an old record): never under the floor
	} {
		if got := b.NoFile(c.pids); got != c.nofile {
			t.Errorf("NoFile(%d) = %d, want %d", c.pids, got, c.nofile)
		}
	}
	// The old main let one sandbox of 32768 PIDs inherit 20000 files each:
	// 655 million, 266 times the whole table. Now the worst is a quarter.
	if worst := b.PIDs * b.NoFile(b.PIDs); worst > reviewHost.FileMax/4 {
		t.Fatalf("the largest sandbox may hold %d files, more than a quarter of file-max", worst)
	}
}

// Whatever the host, no sandbox within the bounds can take more than a
// quarter of the PID table or of the file table.
func TestBoundsKeepEverySandboxWithinAQuarter(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		h := HostInfo{
			FileMax: 4 + r.Int63n(1<<26), NrOpen: 1024 + r.Int63n(1<<20), NoFileHard: 256 + r.Int63n(1<<20),
			PIDMax: 4 + r.Int63n(4<<20), ThreadsMax: 4 + r.Int63n(1<<20),
		}
		b := ComputeBounds(h)
		if b.PIDs*tableShare > min(h.PIDMax, h.ThreadsMax) {
			t.Fatalf("%+v: pids bound %d is more than a quarter of the PID table", h, b.PIDs)
		}
		if b.PIDs < 1 || b.Files < 1 {
			t.Fatalf("%+v: a known host gave an unknown bound: %+v", h, b)
		}
		for _, pids := range []int64{1, 16, b.PIDs / 2, b.PIDs} {
			if pids < 1 || pids > b.PIDs {
				continue
			}
			n := b.NoFile(pids)
			if pids*n > b.Files {
				t.Fatalf("%+v: %d pids × %d files > the share %d", h, pids, n, b.Files)
			}
			if n > h.NoFileHard || n > h.NrOpen {
				t.Fatalf("%+v: NoFile(%d) = %d is more than the runtime can give", h, pids, n)
			}
		}
	}
}

func TestComputeBoundsSmallAndUnknownHosts(t *testing.T) {
	// threads-max smaller than pid_max: threads bound too.
	b := ComputeBounds(HostInfo{PIDMax: 4194304, ThreadsMax: 40000, FileMax: 1 << 40})
	if b.PIDs != 10000 {
		t.Fatalf("pids %d, want threads-max/4", b.PIDs)
	}
	// A small host keeps at most a quarter of its memory and disk.
	b = ComputeBounds(HostInfo{MemTotalMB: 2048, DiskTotalMB: 2048})
	if b.MemoryMB != 1536 || b.DiskReserveMB != 512 {
		t.Fatalf("small host: memory %d, disk reserve %d", b.MemoryMB, b.DiskReserveMB)
	}
	// Nothing known: nothing bounded, and the runtime leaves RLIMIT_NOFILE.
	if b := ComputeBounds(HostInfo{}); b != (HostBounds{}) || b.NoFile(512) != 0 {
		t.Fatalf("unknown host: %+v", b)
	}
}

func TestReadHostInfo(t *testing.T) {
	h := ReadHostInfo(t.TempDir())
	if h.FileMax <= 0 || h.PIDMax <= 0 || h.ThreadsMax <= 0 || h.MemTotalMB <= 0 || h.CPUs <= 0 ||
		h.DiskTotalMB <= 0 || h.DiskFreeMB <= 0 || h.DiskFreeMB > h.DiskTotalMB {
		t.Fatalf("this host: %+v", h)
	}
	if got := parseMemTotalMB([]byte("MemFree: 1 kB\nMemTotal:       24683548 kB\n")); got != 24105 {
		t.Fatalf("MemTotal: %d", got)
	}
}

// fakeHost makes m see h (and held MiB per sandbox directory).
func fakeHost(m *Manager, h HostInfo, held map[string]int64) {
	m.host = &hostLimits{diskDir: "/fake", read: func(string) HostInfo { return h },
		heldMB: func(info *runtime.Info) int64 { return held[info.Dir] }}
}

func TestValidateAgainstTheHost(t *testing.T) {
	m := &Manager{defaults: DefaultDefaults, log: slog.Default()}
	fakeHost(m, reviewHost, nil)
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	for _, c := range []struct {
		req  api.CreateSandboxRequest
		want string
	}{
		{api.CreateSandboxRequest{MemoryMB: i(65536)}, "memory_mb: 65536 is more than this host has (24105 MiB; at most 22599 for one sandbox)"},
		{api.CreateSandboxRequest{CPUs: f(4)}, "cpus: 4 is more than this host has (2 CPUs; at most 2 for one sandbox)"},
		{api.CreateSandboxRequest{PIDsLimit: i(32768)}, "pids_limit: 32768 is more than this host can give one sandbox (pid_max 32768, threads-max 192725, file-max 2466112; at most 2408 for one sandbox)"},
	} {
		_, err := m.validate(&c.req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || err.Error() != c.want {
			t.Errorf("%+v: %v\nwant %s", c.req, err, c.want)
		}
	}
	// At the bounds: accepted.
	spec, err := m.validate(&api.CreateSandboxRequest{MemoryMB: i(22599), CPUs: f(2), PIDsLimit: i(2408)})
	if err != nil || spec.MemoryMB != 22599 || spec.PIDsLimit != 2408 {
		t.Fatalf("at the bounds: %+v %v", spec, err)
	}
	// The daemon's defaults are lowered to a small host, not refused.
	small := reviewHost
	small.CPUs, small.MemTotalMB = 1, 1024
	fakeHost(m, small, nil)
	m.defaults = Defaults{CPUs: 2, MemoryMB: 1024, DiskMB: 2048, PIDsLimit: 512, TimeoutSecs: 300}
	spec, err = m.validate(&api.CreateSandboxRequest{})
	if err != nil || spec.CPUs != 1 || spec.MemoryMB != 768 {
		t.Fatalf("defaults on a small host: %+v %v", spec, err)
	}
}

// The host of issue 16, 2 CPUs and 23 GiB, where `forkbox create --memory
// 65536 --cpus 64` was reported accepted: both are refused with a 400 that
// names the host's numbers, each alone and together (one message that
// names both, so the next try can fix both), and a request within
// MemTotal but into the host's reserve is refused without claiming it is
// more than the host has.
func TestValidateRefusesMoreThanTheHost(t *testing.T) {
	m := &Manager{defaults: DefaultDefaults, log: slog.Default()}
	host := reviewHost
	host.MemTotalMB = 23 * 1024 // reserve 1472, bound 22080
	fakeHost(m, host, nil)
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	for _, c := range []struct {
		req  api.CreateSandboxRequest
		want string
	}{
		{api.CreateSandboxRequest{MemoryMB: i(65536), CPUs: f(64)}, "memory_mb: 65536 is more than this host has (23552 MiB; at most 22080 for one sandbox); cpus: 64 is more than this host has (2 CPUs; at most 2 for one sandbox)"},
		{api.CreateSandboxRequest{MemoryMB: i(65536)}, "memory_mb: 65536 is more than this host has (23552 MiB; at most 22080 for one sandbox)"},
		{api.CreateSandboxRequest{CPUs: f(64)}, "cpus: 64 is more than this host has (2 CPUs; at most 2 for one sandbox)"},
		{api.CreateSandboxRequest{CPUs: f(2.5)}, "cpus: 2.5 is more than this host has (2 CPUs; at most 2 for one sandbox)"},
		{api.CreateSandboxRequest{MemoryMB: i(23553)}, "memory_mb: 23553 is more than this host has (23552 MiB; at most 22080 for one sandbox)"},
		{api.CreateSandboxRequest{MemoryMB: i(23552)}, "memory_mb: 23552 would leave too little of this host's 23552 MiB to the host itself (1472 MiB stay for it; at most 22080 for one sandbox)"},
		{api.CreateSandboxRequest{MemoryMB: i(22081)}, "memory_mb: 22081 would leave too little of this host's 23552 MiB to the host itself (1472 MiB stay for it; at most 22080 for one sandbox)"},
	} {
		_, err := m.validate(&c.req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || err.Error() != c.want {
			t.Errorf("%+v: %v\nwant %s", c.req, err, c.want)
			continue
		}
		if status, code := errdefs.HTTPStatus(err); status != 400 || code != "invalid_argument" {
			t.Errorf("%+v: %d %s, want 400 invalid_argument", c.req, status, code)
		}
	}
	if spec, err := m.validate(&api.CreateSandboxRequest{MemoryMB: i(22080), CPUs: f(2)}); err != nil || spec.MemoryMB != 22080 || spec.CPUs != 2 {
		t.Fatalf("at the bounds: %+v %v", spec, err)
	}
	// A restore names the snapshot its values came from, in both wordings.
	_, err := m.admit(context.Background(), "sbx_r", store.Spec{MemoryMB: 23000}, "snap_big")
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "memory_mb: 23000 (from snapshot snap_big) would leave too little of this host's 23552 MiB") {
		t.Fatalf("restore into the reserve: %v", err)
	}
	_, err = m.admit(context.Background(), "sbx_r", store.Spec{CPUs: 8}, "snap_big")
	if !errors.Is(err, errdefs.ErrInvalidArgument) || err.Error() != "cpus: 8 (from snapshot snap_big) is more than this host has (2 CPUs; at most 2 for one sandbox)" {
		t.Fatalf("restore of more CPUs: %v", err)
	}
}

func TestLimitsCarryNoFile(t *testing.T) {
	m := &Manager{log: slog.Default()}
	fakeHost(m, reviewHost, nil)
	l := m.limits(store.Spec{CPUs: 1, MemoryMB: 512, PIDsLimit: 512})
	if l.PIDs != 512 || l.NoFile != 1204 || l.MemoryMB != 512 || l.CPUs != 1 {
		t.Fatalf("limits: %+v", l)
	}
	// A record from before the bounds runs within them.
	if l := m.limits(store.Spec{PIDsLimit: 32768}); l.PIDs != 2408 || l.NoFile != 256 {
		t.Fatalf("old record: %+v", l)
	}
}

func TestDiskReservations(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := &Manager{store: st, defaults: DefaultDefaults, log: slog.Default()}
	// 20 GiB disk, 10000 MiB free; the host keeps 1024.
	h := HostInfo{FileMax: 1 << 20, PIDMax: 1 << 15, ThreadsMax: 1 << 15, MemTotalMB: 8192, CPUs: 2, DiskTotalMB: 20480, DiskFreeMB: 10000}
	fakeHost(m, h, map[string]int64{"/run/a": 1000})
	now := time.Now()
	for _, sb := range []*store.Sandbox{
		// running, 4000 promised of which its disk holds 1000
		{ID: "sbx_a", State: api.StateRunning, Spec: store.Spec{DiskMB: 4000}, Runtime: runtime.MarshalInfo(&runtime.Info{Dir: "/run/a"})},
		// suspended: holds no disk (its layer is in its suspend image) and
		// promises none; its resume asks again
		{ID: "sbx_b", State: api.StateSuspended, Spec: store.Spec{DiskMB: 2000}},
		// gone: promises nothing
		{ID: "sbx_c", State: api.StateTerminated, Spec: store.Spec{DiskMB: 9000}},
		{ID: "sbx_d", State: api.StateError, Spec: store.Spec{DiskMB: 9000}},
	} {
		sb.CreatedAt, sb.LastActiveAt = now, now
		if err := st.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	// Free for one sandbox ever: 10000 + 1000 held − 1024 = 9976. Now:
	// 10000 − 1024 − 3000 = 5976.
	_, err = m.admit(ctx, "sbx_x", store.Spec{DiskMB: 9977}, "")
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "disk_mb: 9977 is more than this host has") ||
		!strings.Contains(err.Error(), "at most 9976 for one sandbox") {
		t.Fatalf("beyond the host: %v", err)
	}
	_, err = m.admit(ctx, "sbx_x", store.Spec{DiskMB: 5977}, "")
	if !errors.Is(err, errdefs.ErrInsufficientStorage) || !strings.Contains(err.Error(), "3000 MiB promised to the disks of 1 live sandboxes") ||
		!strings.Contains(err.Error(), "leaving 5976 MiB") {
		t.Fatalf("beyond what is free now: %v", err)
	}
	if status, code := errdefs.HTTPStatus(err); status != 507 || code != "insufficient_storage" {
		t.Fatalf("status %d %s", status, code)
	}
	release, err := m.admit(ctx, "sbx_x", store.Spec{DiskMB: 3900}, "")
	if err != nil {
		t.Fatal(err)
	}
	// The create under way holds its promise, also once its record exists.
	if err := st.Create(ctx, &store.Sandbox{ID: "sbx_x", State: api.StateCreating, Spec: store.Spec{DiskMB: 3900}, CreatedAt: now, LastActiveAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.admit(ctx, "sbx_y", store.Spec{DiskMB: 2077}, ""); !errors.Is(err, errdefs.ErrInsufficientStorage) {
		t.Fatalf("after a promise of 3900: %v", err)
	}
	release()
	// Its record promises it now (counted once, not twice).
	if _, err := m.admit(ctx, "sbx_y", store.Spec{DiskMB: 2077}, ""); !errors.Is(err, errdefs.ErrInsufficientStorage) {
		t.Fatalf("the record of the finished create: %v", err)
	}
	// The suspended sandbox's resume fits in the 2076 MiB left...
	rel, err := m.admitResume(ctx, "sbx_b", store.Spec{DiskMB: 2000})
	if err != nil {
		t.Fatalf("resume that fits: %v", err)
	}
	rel()
	// A resume cancelled meanwhile (a delete preempts it) is not short of
	// storage: the random-input run got a 507 "list sandboxes: context
	// canceled".
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.admitResume(cctx, "sbx_b", store.Spec{DiskMB: 10}); errors.Is(err, errdefs.ErrInsufficientStorage) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled resume's admission: %v; want the cancellation, not 507", err)
	}
	// ...but not once a create has taken 1000 of them: 507, and it says the
	// sandbox stays suspended.
	rel, err = m.admit(ctx, "sbx_y", store.Spec{DiskMB: 1000}, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.admitResume(ctx, "sbx_b", store.Spec{DiskMB: 2000})
	if !errors.Is(err, errdefs.ErrInsufficientStorage) || !strings.Contains(err.Error(), "to resume sbx_b") ||
		!strings.Contains(err.Error(), "stays suspended") {
		t.Fatalf("resume that does not fit now: %v", err)
	}
	rel()
	// Deleting a running sandbox frees its promise.
	if _, err := st.Update(ctx, "sbx_x", func(s *store.Sandbox) error { s.State = api.StateTerminated; return nil }); err != nil {
		t.Fatal(err)
	}
	rel, err = m.admit(ctx, "sbx_y", store.Spec{DiskMB: 5900}, "")
	if err != nil {
		t.Fatalf("after deleting one: %v", err)
	}
	rel()
	// A restore names the snapshot its values came from.
	_, err = m.admit(ctx, "sbx_z", store.Spec{DiskMB: 100, MemoryMB: 65536}, "snap_big")
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "memory_mb: 65536 (from snapshot snap_big) is more than this host has") {
		t.Fatalf("restore from a bigger host: %v", err)
	}
	// A pool that does not fit now: 507; one whose snapshot cannot fit: 400.
	m.defaults.DiskMB = 1000
	err = m.checkPool(ctx, store.Pool{Name: "p", Image: "python", Size: 6})
	if !errors.Is(err, errdefs.ErrInsufficientStorage) || !strings.Contains(err.Error(), "pool of 6 sandboxes") {
		t.Fatalf("pool too big for now: %v", err)
	}
	if err := m.checkPool(ctx, store.Pool{Name: "p", Image: "python", Size: 5}); err != nil {
		t.Fatalf("pool that fits: %v", err)
	}
}

// Two creates racing for the last space: exactly one is promised it.
func TestDiskAdmissionIsAtomic(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := &Manager{store: st, log: slog.Default()}
	fakeHost(m, HostInfo{DiskTotalMB: 4096, DiskFreeMB: 3024}, nil) // 2000 MiB promisable
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func(i int) {
			_, err := m.admit(ctx, fmt.Sprintf("sbx_%d", i), store.Spec{DiskMB: 600}, "")
			errs <- err
		}(i)
	}
	ok := 0
	for i := 0; i < 8; i++ {
		if err := <-errs; err == nil {
			ok++
		} else if !errors.Is(err, errdefs.ErrInsufficientStorage) {
			t.Fatal(err)
		}
	}
	if ok != 3 {
		t.Fatalf("%d creates of 600 MiB were promised 2000 MiB", ok)
	}
}
