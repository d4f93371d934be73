package sandbox

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
)

func TestValidateDefaultsAndRanges(t *testing.T) {
	m := &Manager{defaults: DefaultDefaults}
	spec, err := m.validate(&api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if spec.CPUs != DefaultDefaults.CPUs || spec.MemoryMB != DefaultDefaults.MemoryMB || spec.TimeoutSecs != 300 {
		t.Fatalf("defaults not applied: %+v", spec)
	}
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	bad := map[string]api.CreateSandboxRequest{
		"cpus":              {CPUs: f(0.05)},
		"memory_mb":         {MemoryMB: i(63)},
		"disk_mb":           {DiskMB: i(1 << 21)},
		"pids_limit":        {PIDsLimit: i(15)},
		"timeout_secs":      {TimeoutSecs: i(0)},
		"max_lifetime_secs": {MaxLifetimeSecs: i(-1)},
		"name":              {Name: "sbx_looks_like_an_id"},
		"env":               {Env: map[string]string{"A-B": "x"}},
		"labels":            {Labels: map[string]string{"a:b": "x"}},
	}
	for field, req := range bad {
		_, err := m.validate(&req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want invalid_argument naming the field", field, err)
		}
	}
	ok, err := m.validate(&api.CreateSandboxRequest{Name: "alice-1", CPUs: f(0.5), MemoryMB: i(64), TimeoutSecs: i(2)})
	if err != nil || ok.CPUs != 0.5 || ok.MemoryMB != 64 || ok.TimeoutSecs != 2 {
		t.Fatalf("valid request: %+v %v", ok, err)
	}
}

func TestTransitions(t *testing.T) {
	if err := checkTransition("x", api.StateCreating, api.StateRunning); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]api.SandboxState{{api.StateTerminated, api.StateRunning}, {api.StateRunning, api.StateResuming}, {api.StateError, api.StateRunning}} {
		if err := checkTransition("x", c[0], c[1]); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("%s -> %s: %v, want failed precondition", c[0], c[1], err)
		}
	}
}

// liveStates, which the disk room and the quotas query one by one, are the
// states whose HoldsProcesses is true (the transitions table names every
// state).
func TestLiveStates(t *testing.T) {
	for state := range transitions {
		if listed := slices.Contains(liveStates, state); state.HoldsProcesses() != listed {
			t.Errorf("%s: HoldsProcesses() is %v, in liveStates: %v", state, state.HoldsProcesses(), listed)
		}
	}
}

// A cell holding a NUL byte is refused before it reaches a kernel:
// ipykernel never answers one, so the call would hang and hold up every
// cell queued behind it in its context.
func TestRunCodeRefusesNUL(t *testing.T) {
	t.Parallel()
	e := startedEnv(t)
	sb := e.create(&api.CreateSandboxRequest{})
	_, err := e.m.RunCode(e.ctx, sb.ID, &api.RunCodeRequest{Code: "x = 1\x00"}, CodeOptions{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "NUL") {
		t.Fatalf("a cell with a NUL byte: %v; want invalid argument naming it", err)
	}
}
