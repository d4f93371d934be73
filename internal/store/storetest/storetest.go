// Package storetest is the conformance suite of the store's interfaces, in
// the spirit of containerd's snapshots/testsuite: every backend (SQLite and
// PostgreSQL) runs it from its own tests, so all of them are held to the
// same contract, the one documented on the interfaces.
//
//	func TestConformance(t *testing.T) {
//		storetest.RunBackend(t, func(t *testing.T) store.Backend { return openFresh(t) })
//	}
//
// Run, RunConversations, RunAccess, RunCells and RunNodes run one
// interface's part; RunPaging the lists' pages and the retention's prune
// across them; RunConcurrent holds several instances on one database
// (several daemons) to the same contract while they race.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/store"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Run runs the whole suite. newStore must return a fresh, empty store each
// time it is called; it is called once per subtest, and Run closes the store
// when the subtest ends (register any further cleanup with t.Cleanup in
// newStore: it runs after the close).
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CreateGet", testCreateGet},
		{"CreateDefaults", testCreateDefaults},
		{"CreateDuplicateLiveName", testCreateDuplicateLiveName},
		{"CreateDuplicateID", testCreateDuplicateID},
		{"EphemeralSandboxesShareEmptyName", testEphemeralShareEmptyName},
		{"NameReuseAfterTerminate", testNameReuseAfterTerminate},
		{"GetPrefersLiveThenNewest", testGetPrefersLiveThenNewest},
		{"GetIDBeforeName", testGetIDBeforeName},
		{"GetNotFound", testGetNotFound},
		{"List", testList},
		{"UpdateAllFields", testUpdateAllFields},
		{"UpdateClearsTerminatedAt", testUpdateClearsTerminatedAt},
		{"UpdateResultMatchesStored", testUpdateResultMatchesStored},
		{"UpdateStateRecordsEvent", testUpdateStateRecordsEvent},
		{"UpdateWithoutStateChangeNoEvent", testUpdateNoStateChangeNoEvent},
		{"UpdateFnErrorAborts", testUpdateFnErrorAborts},
		{"UpdateNotFound", testUpdateNotFound},
		{"UpdateRenameConflict", testUpdateRenameConflict},
		{"UpdateReviveConflict", testUpdateReviveConflict},
		{"Touch", testTouch},
		{"EventsOrder", testEventsOrder},
		{"ConcurrentUpdates", testConcurrentUpdates},
		{"TimePrecisionUTC", testTimePrecisionUTC},
		{"Snapshots", testSnapshots},
		{"TenantScoping", testTenantScoping},
		{"NodeRoundTrip", testNodeRoundTrip},
		{"ListNode", testListNode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// base is a fixed, whole-second-free instant so that every test exercises
// nanosecond round-tripping without asking for it.
var base = time.Date(2025, 6, 7, 8, 9, 10, 123456789, time.UTC)

// at returns base plus n seconds (and n nanoseconds, so that no two instants
// used by a test share their sub-second part).
func at(n int) time.Time { return base.Add(time.Duration(n)*time.Second + time.Duration(n)) }

func newSandbox(id, name string, state api.SandboxState, created time.Time) *store.Sandbox {
	return &store.Sandbox{
		ID:          id,
		Tenant:      api.DefaultTenant,
		Name:        name,
		State:       state,
		StateReason: "created by test",
		Image:       "python:3.12",
		SnapshotID:  "",
		Spec: store.Spec{
			CPUs:        1.5,
			MemoryMB:    512,
			DiskMB:      1024,
			PIDsLimit:   256,
			TimeoutSecs: 300,
			Env:         map[string]string{"A": "1"},
			Labels:      map[string]string{"team": "core"},
		},
		Runtime:      json.RawMessage(`{"pid":42,"dir":"/run/forkbox/` + id + `"}`),
		CreatedAt:    created,
		LastActiveAt: created,
	}
}

func mustCreate(t *testing.T, s store.Store, sb *store.Sandbox) {
	t.Helper()
	if err := s.Create(context.Background(), sb); err != nil {
		t.Fatalf("Create(%s, name %q): %v", sb.ID, sb.Name, err)
	}
}

func mustGet(t *testing.T, s store.Store, ref string) *store.Sandbox {
	t.Helper()
	sb, err := s.Get(context.Background(), ref)
	if err != nil {
		t.Fatalf("Get(%q): %v", ref, err)
	}
	return sb
}

func mustUpdate(t *testing.T, s store.Store, id string, fn func(*store.Sandbox) error) *store.Sandbox {
	t.Helper()
	sb, err := s.Update(context.Background(), id, fn)
	if err != nil {
		t.Fatalf("Update(%s): %v", id, err)
	}
	return sb
}

func mustEvents(t *testing.T, s store.Store, id string) []store.Event {
	t.Helper()
	ev, err := s.Events(context.Background(), id)
	if err != nil {
		t.Fatalf("Events(%s): %v", id, err)
	}
	return ev
}

func terminate(reason string, when time.Time) func(*store.Sandbox) error {
	return func(sb *store.Sandbox) error {
		sb.State = api.StateTerminated
		sb.StateReason = reason
		sb.TerminatedAt = &when
		return nil
	}
}

// Diff describes how got differs from want (-want +got), or returns "" when
// they are the same record: every field compared, with only the differences
// RecordOptions allows.
func Diff(want, got *store.Sandbox) string { return recordDiff(want, got) }

// recordDiff is Diff for any of the store's records, or slices of them.
func recordDiff(want, got any) string {
	if d := cmp.Diff(want, got, RecordOptions); d != "" {
		return "\n" + d
	}
	return ""
}

// RecordOptions compare the store's records (sandboxes, events, snapshots,
// pools, nodes, keys, audit entries, conversations, turns, uploads, cells)
// whole: every field, exported or added later, is compared, and each option
// below is a difference the store's contract allows.
//
// Times need none: go-cmp compares a time.Time with its Equal method, so an
// instant is compared, not its location or monotonic reading (the tests of
// UTC check the location where the store promises it), and no precision is
// given up (both backends keep nanoseconds).
var RecordOptions = cmp.Options{
	// A sandbox's Runtime, a turn's Turn and Messages and a cell's
	// Execution are JSON documents the store keeps without interpreting
	// them: they compare as JSON values, so a backend may re-encode one
	// (key order, spacing); an empty document stays empty.
	cmp.FilterPath(func(p cmp.Path) bool { return !isSandboxRuntime(p) }, cmp.Comparer(rawEqual)),
	// Except that a sandbox without a runtime record is kept as {} (the
	// column's default), so there empty and {} are the same.
	cmp.FilterPath(isSandboxRuntime, cmp.Comparer(jsonEqual)),
	// A Spec is kept as JSON whose maps are omitempty: an empty Env,
	// Labels, Ports or E2B.Contexts comes back nil.
	cmp.FilterValues(bothEmptyMaps, cmp.Comparer(func(_, _ any) bool { return true })),
}

var sandboxType = reflect.TypeFor[store.Sandbox]()

func isSandboxRuntime(p cmp.Path) bool {
	f, ok := p.Last().(cmp.StructField)
	return ok && f.Name() == "Runtime" && len(p) >= 2 && p.Index(-2).Type() == sandboxType
}

func bothEmptyMaps(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.IsValid() && vb.IsValid() && va.Type() == vb.Type() &&
		va.Kind() == reflect.Map && va.Len() == 0 && vb.Len() == 0
}

// eventOpts compare events but for the two fields the store assigns: ID
// (only its order is promised; EventsOrder checks it) and At (the time the
// change was stored; UpdateStateRecordsEvent checks it).
var eventOpts = cmp.Options{RecordOptions, cmpopts.IgnoreFields(store.Event{}, "ID", "At")}

// rawEqual compares stored JSON documents as values; empty equals empty only.
func rawEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	return jsonEqual(a, b)
}

// jsonEqual compares JSON documents as values, empty as {}.
func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 {
		a = json.RawMessage(`{}`)
	}
	if len(b) == 0 {
		b = json.RawMessage(`{}`)
	}
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		return bytes.Equal(a, b)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// unsetFields names the fields of v, a struct or a pointer to one, that hold
// their zero value (nested structs walked, also through pointers; a nil
// pointer, an empty map or slice counted as unset, a pointer to a zero
// number as set). A test that means to store every field of a record checks
// its record with it, so that a field added to the record later cannot go
// untested.
func unsetFields(v any) []string {
	var out []string
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		switch {
		case v.Kind() == reflect.Pointer:
			if v.IsNil() {
				out = append(out, prefix)
			} else if v.Elem().Kind() == reflect.Struct {
				walk(prefix, v.Elem())
			}
		case v.Kind() == reflect.Struct && v.Type() != reflect.TypeFor[time.Time]():
			for i := range v.NumField() {
				walk(strings.TrimPrefix(prefix+"."+v.Type().Field(i).Name, "."), v.Field(i))
			}
		case v.Kind() == reflect.Map || v.Kind() == reflect.Slice:
			if v.Len() == 0 {
				out = append(out, prefix)
			}
		case v.IsZero():
			out = append(out, prefix)
		}
	}
	walk("", reflect.ValueOf(v))
	return out
}

// mustBeFull fails the test when record leaves a field unset (unsetFields).
func mustBeFull(t *testing.T, what string, record any) {
	t.Helper()
	if unset := unsetFields(record); len(unset) > 0 {
		t.Fatalf("%s leaves %v unset: the test must give every field a value", what, unset)
	}
}

func expectSame(t *testing.T, what string, want, got *store.Sandbox) {
	t.Helper()
	if d := Diff(want, got); d != "" {
		t.Errorf("%s differs:%s", what, d)
	}
}

func ids(sbs []*store.Sandbox) []string {
	out := make([]string, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return out
}

func testCreateGet(t *testing.T, s store.Store) {
	sb := newSandbox("sb-1", "alpha", api.StateRunning, at(1))
	sb.SnapshotID = "snap-9"
	sb.Spec.MaxLifetimeSecs = 3600
	sb.Spec.AllowInternetAccess = true
	sb.Spec.Network = &api.NetworkPolicy{AllowOut: []string{"pypi.org", "*.example.com"}, DenyOut: []string{"203.0.113.0/24"}}
	sb.Spec.NoAutoResume = true
	sb.Spec.UIDBase = 1 << 20
	sb.Spec.Ports = map[int]store.PortAccess{8080: {Token: "tok-8080", Public: true}}
	sb.Spec.SuspendOnIdle = true
	sb.Spec.E2B = &store.E2BAccess{EnvdToken: "envd", TrafficToken: "traffic", Template: "code-interpreter-v1",
		Contexts: map[string]string{"python": "ctx-1"}}
	sb.SuspendImage = "snap-suspend-1"
	sb.Node = "node-a"
	term := at(2) // the store keeps whatever it is given, even on a live row
	sb.TerminatedAt = &term
	mustBeFull(t, "the sandbox", sb)
	want := *sb
	mustCreate(t, s, sb)

	expectSame(t, "Get by id", &want, mustGet(t, s, "sb-1"))
	expectSame(t, "Get by name", &want, mustGet(t, s, "alpha"))

	// The returned record is the caller's own: changing it must not change
	// what the store holds.
	got := mustGet(t, s, "sb-1")
	got.Spec.Labels["team"] = "mutated"
	got.Spec.Ports[8080] = store.PortAccess{Token: "mutated"}
	got.Spec.E2B.Contexts["python"] = "mutated"
	got.State = api.StateError
	expectSame(t, "Get after mutating an earlier result", &want, mustGet(t, s, "sb-1"))
}

func testCreateDefaults(t *testing.T, s store.Store) {
	// An ephemeral sandbox with nothing optional set: empty name, no
	// runtime record yet, no maps.
	sb := &store.Sandbox{ID: "eph", State: api.StateCreating, CreatedAt: at(1), LastActiveAt: at(1)}
	mustCreate(t, s, sb)
	got := mustGet(t, s, "eph")
	expectSame(t, "Get", sb, got)
	if got.TerminatedAt != nil {
		t.Errorf("TerminatedAt = %v, want nil", got.TerminatedAt)
	}
	if len(got.Runtime) != 0 && !json.Valid(got.Runtime) {
		t.Errorf("Runtime = %q: not valid JSON", got.Runtime)
	}
}

func testCreateDuplicateLiveName(t *testing.T, s store.Store) {
	mustCreate(t, s, newSandbox("sb-1", "alpha", api.StateRunning, at(1)))
	err := s.Create(context.Background(), newSandbox("sb-2", "alpha", api.StateCreating, at(2)))
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Create with a live name in use: err = %v, want ErrConflict", err)
	}
	// Nothing of the refused sandbox may remain.
	if _, err := s.Get(context.Background(), "sb-2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(sb-2) after refused Create: err = %v, want ErrNotFound", err)
	}
	if ev := mustEvents(t, s, "sb-2"); len(ev) != 0 {
		t.Errorf("refused Create left events: %+v", ev)
	}
	if got := mustGet(t, s, "alpha"); got.ID != "sb-1" {
		t.Errorf("Get(alpha) = %s, want sb-1", got.ID)
	}
}

func testCreateDuplicateID(t *testing.T, s store.Store) {
	mustCreate(t, s, newSandbox("sb-1", "alpha", api.StateRunning, at(1)))
	err := s.Create(context.Background(), newSandbox("sb-1", "beta", api.StateRunning, at(2)))
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Create with an existing id: err = %v, want ErrConflict", err)
	}
	if got := mustGet(t, s, "sb-1"); got.Name != "alpha" {
		t.Errorf("existing sandbox overwritten: name = %q", got.Name)
	}
	if ev := mustEvents(t, s, "sb-1"); len(ev) != 1 {
		t.Errorf("events after refused duplicate Create = %+v, want only the first Create's", ev)
	}
}

func testEphemeralShareEmptyName(t *testing.T, s store.Store) {
	// "" is not a name: any number of live ephemeral sandboxes may exist, and
	// Get("") finds none of them.
	for i := range 3 {
		mustCreate(t, s, newSandbox(fmt.Sprintf("eph-%d", i), "", api.StateRunning, at(i)))
	}
	if _, err := s.Get(context.Background(), ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf(`Get("") err = %v, want ErrNotFound`, err)
	}
}

func testNameReuseAfterTerminate(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreate(t, s, newSandbox("old", "alpha", api.StateRunning, at(1)))
	mustUpdate(t, s, "old", terminate("deleted", at(2)))

	mustCreate(t, s, newSandbox("new", "alpha", api.StateRunning, at(3)))
	if got := mustGet(t, s, "alpha"); got.ID != "new" {
		t.Errorf("Get(alpha) = %s, want the live one (new)", got.ID)
	}
	// The old one is still reachable by id.
	if got := mustGet(t, s, "old"); got.State != api.StateTerminated {
		t.Errorf("old sandbox state = %q, want terminated", got.State)
	}
	// And a second live one is still refused.
	if err := s.Create(ctx, newSandbox("third", "alpha", api.StateCreating, at(4))); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("third Create with live name: err = %v, want ErrConflict", err)
	}
	// Once the new one is gone too, the name resolves to the most recent.
	mustUpdate(t, s, "new", terminate("deleted", at(5)))
	if got := mustGet(t, s, "alpha"); got.ID != "new" {
		t.Errorf("Get(alpha) with only terminated sandboxes = %s, want the most recent (new)", got.ID)
	}
	// Several terminated sandboxes may share a name.
	mustCreate(t, s, newSandbox("gone", "alpha", api.StateTerminated, at(6)))
	if got := mustGet(t, s, "alpha"); got.ID != "gone" {
		t.Errorf("Get(alpha) = %s, want the most recent (gone)", got.ID)
	}
}

func testGetPrefersLiveThenNewest(t *testing.T, s store.Store) {
	// The live sandbox is the oldest one: it still wins over newer
	// terminated ones.
	mustCreate(t, s, newSandbox("live", "alpha", api.StateSuspended, at(1)))
	mustCreate(t, s, newSandbox("dead-1", "alpha", api.StateTerminated, at(2)))
	mustCreate(t, s, newSandbox("dead-2", "alpha", api.StateTerminated, at(3)))
	if got := mustGet(t, s, "alpha"); got.ID != "live" {
		t.Errorf("Get(alpha) = %s, want live", got.ID)
	}
	mustUpdate(t, s, "live", terminate("gone", at(4)))
	if got := mustGet(t, s, "alpha"); got.ID != "dead-2" {
		t.Errorf("Get(alpha) = %s, want the most recently created (dead-2)", got.ID)
	}
}

func testGetIDBeforeName(t *testing.T, s store.Store) {
	mustCreate(t, s, newSandbox("shadow", "", api.StateTerminated, at(1)))
	mustCreate(t, s, newSandbox("sb-2", "shadow", api.StateRunning, at(2)))
	if got := mustGet(t, s, "shadow"); got.ID != "shadow" {
		t.Errorf("Get(shadow) = %s, want the sandbox whose id is shadow", got.ID)
	}
}

func testGetNotFound(t *testing.T, s store.Store) {
	mustCreate(t, s, newSandbox("sb-1", "alpha", api.StateRunning, at(1)))
	for _, ref := range []string{"nope", "sb-", "ALPHA", "alph", "%", "alpha' OR '1'='1"} {
		sb, err := s.Get(context.Background(), ref)
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get(%q) = %v, %v; want ErrNotFound", ref, sb, err)
		}
	}
}

func testList(t *testing.T, s store.Store) {
	ctx := context.Background()
	mk := func(id, name string, state api.SandboxState, n int, labels map[string]string) {
		sb := newSandbox(id, name, state, at(n))
		sb.Spec.Labels = labels
		mustCreate(t, s, sb)
	}
	// Created out of order so that insertion order is not creation order.
	mk("c", "gamma", api.StateRunning, 3, map[string]string{"team": "core", "env": "prod"})
	mk("a", "alpha", api.StateRunning, 1, map[string]string{"team": "core"})
	mk("e", "", api.StateSuspended, 5, map[string]string{"team": "ml", "env": "prod"})
	mk("b", "alpha", api.StateTerminated, 0, nil)
	mk("d", "delta", api.StateTerminated, 4, map[string]string{"env": "prod"})

	cases := []struct {
		name string
		f    store.ListFilter
		want []string
	}{
		{"all", store.ListFilter{}, []string{"e", "d", "c", "a", "b"}},
		{"state", store.ListFilter{State: api.StateRunning}, []string{"c", "a"}},
		{"state terminated", store.ListFilter{State: api.StateTerminated}, []string{"d", "b"}},
		{"state none", store.ListFilter{State: api.StateError}, nil},
		{"name", store.ListFilter{Name: "alpha"}, []string{"a", "b"}},
		{"name unknown", store.ListFilter{Name: "zeta"}, nil},
		{"name and state", store.ListFilter{Name: "alpha", State: api.StateTerminated}, []string{"b"}},
		{"one label", store.ListFilter{Labels: map[string]string{"env": "prod"}}, []string{"e", "d", "c"}},
		{"all labels must match", store.ListFilter{Labels: map[string]string{"env": "prod", "team": "core"}}, []string{"c"}},
		{"label value must match", store.ListFilter{Labels: map[string]string{"team": "ml"}}, []string{"e"}},
		{"label absent", store.ListFilter{Labels: map[string]string{"owner": "x"}}, nil},
		{"empty label value is not a wildcard", store.ListFilter{Labels: map[string]string{"team": ""}}, nil},
		{"labels and state", store.ListFilter{State: api.StateTerminated, Labels: map[string]string{"env": "prod"}}, []string{"d"}},
		{"empty labels map", store.ListFilter{Labels: map[string]string{}}, []string{"e", "d", "c", "a", "b"}},
	}
	for _, tc := range cases {
		got, err := s.List(ctx, tc.f)
		if err != nil {
			t.Errorf("%s: List(%+v): %v", tc.name, tc.f, err)
			continue
		}
		if g := ids(got); !reflect.DeepEqual(g, append([]string{}, tc.want...)) {
			t.Errorf("%s: List(%+v) = %v, want %v", tc.name, tc.f, g, tc.want)
		}
	}

	// List returns whole records.
	all, err := s.List(ctx, store.ListFilter{Name: "gamma"})
	if err != nil || len(all) != 1 {
		t.Fatalf("List(name gamma) = %v, %v", ids(all), err)
	}
	want := newSandbox("c", "gamma", api.StateRunning, at(3))
	want.Spec.Labels = map[string]string{"team": "core", "env": "prod"}
	expectSame(t, "List record", want, all[0])
}

func testUpdateAllFields(t *testing.T, s store.Store) {
	orig := newSandbox("sb-1", "alpha", api.StateCreating, at(1))
	mustCreate(t, s, orig)

	term := at(9)
	want := &store.Sandbox{
		ID:          "sb-1",
		Tenant:      api.DefaultTenant,
		Name:        "beta",
		State:       api.StateSuspended,
		StateReason: "idle timeout",
		Image:       "python:3.13",
		SnapshotID:  "snap-2",
		Spec: store.Spec{
			CPUs:                0.25,
			MemoryMB:            2048,
			DiskMB:              4096,
			PIDsLimit:           64,
			TimeoutSecs:         60,
			MaxLifetimeSecs:     7200,
			AllowInternetAccess: true,
			Network:             &api.NetworkPolicy{AllowOut: []string{"10.1.2.3"}, DenyOut: []string{"198.51.100.7"}},
			Env:                 map[string]string{"B": "2", "EMPTY": ""},
			Labels:              map[string]string{"team": "ml", "tier": "gold"},
			NoAutoResume:        true,
			UIDBase:             2 << 20,
			Ports:               map[int]store.PortAccess{3000: {Token: "tok-3000"}, 8888: {Token: "tok-8888", Public: true}},
			SuspendOnIdle:       true,
			E2B: &store.E2BAccess{EnvdToken: "envd-2", TrafficToken: "traffic-2", Template: "base",
				Contexts: map[string]string{"python": "ctx-2", "r": "ctx-3"}},
		},
		Runtime:      json.RawMessage(`{"pid":4242,"cgroup":"/sys/fs/cgroup/forkbox/sb-1","veth":{"host":"fb0","ip":"10.0.0.2"}}`),
		SuspendImage: "snap-suspend-2",
		Node:         "node-b",
		CreatedAt:    at(5), // a warm pool's sandbox handed out
		LastActiveAt: at(7),
		TerminatedAt: &term,
	}
	mustBeFull(t, "the updated sandbox", want)
	got := mustUpdate(t, s, "sb-1", func(sb *store.Sandbox) error {
		expectSame(t, "fn's argument", orig, sb)
		// A copy that shares nothing with want.
		c := *want
		c.Spec.Env = maps.Clone(want.Spec.Env)
		c.Spec.Labels = maps.Clone(want.Spec.Labels)
		c.Spec.Ports = maps.Clone(want.Spec.Ports)
		network, e2b := *want.Spec.Network, *want.Spec.E2B
		network.AllowOut, network.DenyOut = slices.Clone(network.AllowOut), slices.Clone(network.DenyOut)
		e2b.Contexts = maps.Clone(e2b.Contexts)
		c.Spec.Network, c.Spec.E2B = &network, &e2b
		term := *want.TerminatedAt
		c.TerminatedAt = &term
		*sb = c
		return nil
	})
	expectSame(t, "Update result", want, got)
	expectSame(t, "Get after Update", want, mustGet(t, s, "sb-1"))
	expectSame(t, "Get by new name after Update", want, mustGet(t, s, "beta"))
	if _, err := s.Get(context.Background(), "alpha"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(old name) err = %v, want ErrNotFound", err)
	}
}

func testUpdateClearsTerminatedAt(t *testing.T, s store.Store) {
	sb := newSandbox("sb-1", "", api.StateRunning, at(1))
	mustCreate(t, s, sb)
	mustUpdate(t, s, "sb-1", terminate("stop", at(2)))
	if got := mustGet(t, s, "sb-1"); got.TerminatedAt == nil || !got.TerminatedAt.Equal(at(2)) {
		t.Fatalf("TerminatedAt = %v, want %v", got.TerminatedAt, at(2))
	}
	mustUpdate(t, s, "sb-1", func(sb *store.Sandbox) error {
		sb.State = api.StateRunning
		sb.TerminatedAt = nil
		sb.Runtime = nil
		return nil
	})
	got := mustGet(t, s, "sb-1")
	if got.TerminatedAt != nil {
		t.Errorf("TerminatedAt = %v after setting it to nil", got.TerminatedAt)
	}
	if !jsonEqual(got.Runtime, nil) {
		t.Errorf("Runtime = %s after clearing it, want empty or {}", got.Runtime)
	}
}

func testUpdateResultMatchesStored(t *testing.T, s store.Store) {
	// Whatever fn does, including to a field Update never writes (ID),
	// the record Update returns is the one that was stored.
	mustCreate(t, s, newSandbox("sb-1", "alpha", api.StateRunning, at(1)))
	got := mustUpdate(t, s, "sb-1", func(sb *store.Sandbox) error {
		sb.ID = "sb-other"
		sb.CreatedAt = at(50)
		sb.Image = "changed"
		return nil
	})
	if got.ID != "sb-1" {
		t.Errorf("Update result ID = %q, want sb-1", got.ID)
	}
	expectSame(t, "Update result vs Get", mustGet(t, s, "sb-1"), got)
	if _, err := s.Get(context.Background(), "sb-other"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(sb-other) err = %v, want ErrNotFound: Update must not change the id", err)
	}
}

func testUpdateStateRecordsEvent(t *testing.T, s store.Store) {
	mustCreate(t, s, newSandbox("sb-1", "alpha", api.StateCreating, at(1)))
	before := time.Now()
	mustUpdate(t, s, "sb-1", func(sb *store.Sandbox) error {
		sb.State = api.StateRunning
		sb.StateReason = "started"
		return nil
	})
	after := time.Now()
	ev := mustEvents(t, s, "sb-1")
	want := []store.Event{
		{SandboxID: "sb-1", From: "", To: api.StateCreating, Reason: "created by test"},
		{SandboxID: "sb-1", From: api.StateCreating, To: api.StateRunning, Reason: "started"},
	}
	if d := cmp.Diff(want, ev, eventOpts); d != "" {
		t.Fatalf("events differ (-want +got):\n%s", d)
	}
	e := ev[1]
	// The event is stamped when the change is stored.
	if e.At.Before(before.Add(-time.Second)) || e.At.After(after.Add(time.Second)) {
		t.Errorf("event At = %v, want between %v and %v", e.At, before, after)
	}
}

func testUpdateNoStateChangeNoEvent(t *testing.T, s store.Store) {
	mustCreate(t, s, newSandbox("sb-1", "alpha", api.StateRunning, at(1)))
	mustUpdate(t, s, "sb-1", func(sb *store.Sandbox) error {
		sb.StateReason = "a new reason but the same state"
		sb.Image = "other"
		sb.Spec.Labels["x"] = "y"
		return nil
	})
	mustUpdate(t, s, "sb-1", func(*store.Sandbox) error { return nil })
	if ev := mustEvents(t, s, "sb-1"); len(ev) != 1 {
		t.Errorf("events = %+v, want only the Create event", ev)
	}
	if got := mustGet(t, s, "sb-1"); got.Image != "other" || got.Spec.Labels["x"] != "y" {
		t.Errorf("Update without state change not stored: %+v", got)
	}
}

func testUpdateFnErrorAborts(t *testing.T, s store.Store) {
	orig := newSandbox("sb-1", "alpha", api.StateRunning, at(1))
	mustCreate(t, s, orig)
	boom := errors.New("boom")
	_, err := s.Update(context.Background(), "sb-1", func(sb *store.Sandbox) error {
		sb.State = api.StateTerminated
		sb.StateReason = "should not stick"
		sb.Name = "beta"
		sb.Spec.Labels["x"] = "y"
		sb.Runtime = json.RawMessage(`{"pid":1}`)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update err = %v, want fn's error", err)
	}
	// A kind error from fn keeps its kind.
	_, err = s.Update(context.Background(), "sb-1", func(sb *store.Sandbox) error {
		sb.State = api.StateSuspended
		return errdefs.FailedPrecondition("sandbox is busy")
	})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Update err = %v, want ErrFailedPrecondition from fn", err)
	}
	expectSame(t, "row after aborted Update", orig, mustGet(t, s, "sb-1"))
	if ev := mustEvents(t, s, "sb-1"); len(ev) != 1 {
		t.Errorf("events after aborted Update = %+v, want only the Create event", ev)
	}
	// The name was not taken by the aborted rename.
	mustCreate(t, s, newSandbox("sb-2", "beta", api.StateRunning, at(2)))
}

func testUpdateNotFound(t *testing.T, s store.Store) {
	mustCreate(t, s, newSandbox("sb-1", "alpha", api.StateRunning, at(1)))
	called := false
	_, err := s.Update(context.Background(), "nope", func(*store.Sandbox) error { called = true; return nil })
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Update(unknown) err = %v, want ErrNotFound", err)
	}
	if called {
		t.Errorf("Update(unknown) called fn")
	}
	// Update is by id only, never by name.
	_, err = s.Update(context.Background(), "alpha", func(*store.Sandbox) error { called = true; return nil })
	if !errors.Is(err, errdefs.ErrNotFound) || called {
		t.Errorf("Update(name) err = %v, fn called %v; want ErrNotFound, not called", err, called)
	}
}

func testUpdateRenameConflict(t *testing.T, s store.Store) {
	mustCreate(t, s, newSandbox("sb-1", "alpha", api.StateRunning, at(1)))
	orig := newSandbox("sb-2", "beta", api.StateRunning, at(2))
	mustCreate(t, s, orig)
	_, err := s.Update(context.Background(), "sb-2", func(sb *store.Sandbox) error {
		sb.Name = "alpha"
		sb.State = api.StateSuspended
		return nil
	})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("rename to a live name: err = %v, want ErrConflict", err)
	}
	expectSame(t, "row after refused rename", orig, mustGet(t, s, "sb-2"))
	if ev := mustEvents(t, s, "sb-2"); len(ev) != 1 {
		t.Errorf("events after refused rename = %+v, want only the Create event", ev)
	}
	if got := mustGet(t, s, "alpha"); got.ID != "sb-1" {
		t.Errorf("Get(alpha) = %s, want sb-1", got.ID)
	}

	// Renaming to the name of a terminated sandbox is fine.
	mustUpdate(t, s, "sb-1", terminate("gone", at(3)))
	got := mustUpdate(t, s, "sb-2", func(sb *store.Sandbox) error { sb.Name = "alpha"; return nil })
	if got.Name != "alpha" {
		t.Errorf("rename result name = %q", got.Name)
	}
	if got := mustGet(t, s, "alpha"); got.ID != "sb-2" {
		t.Errorf("Get(alpha) = %s, want sb-2", got.ID)
	}
}

func testUpdateReviveConflict(t *testing.T, s store.Store) {
	// A terminated sandbox cannot come back to life while another live
	// sandbox holds its name.
	mustCreate(t, s, newSandbox("old", "alpha", api.StateRunning, at(1)))
	mustUpdate(t, s, "old", terminate("gone", at(2)))
	mustCreate(t, s, newSandbox("new", "alpha", api.StateRunning, at(3)))
	_, err := s.Update(context.Background(), "old", func(sb *store.Sandbox) error {
		sb.State = api.StateRunning
		sb.TerminatedAt = nil
		return nil
	})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("reviving old with its name in use: err = %v, want ErrConflict", err)
	}
	if got := mustGet(t, s, "old"); got.State != api.StateTerminated {
		t.Errorf("old state = %q after refused revive", got.State)
	}
}

func testTouch(t *testing.T, s store.Store) {
	ctx := context.Background()
	orig := newSandbox("sb-1", "alpha", api.StateRunning, at(1))
	mustCreate(t, s, orig)

	if err := s.Touch(ctx, "sb-1", at(5)); err != nil {
		t.Fatalf("Touch: %v", err)
	}
	want := *orig
	want.LastActiveAt = at(5)
	expectSame(t, "after Touch forward", &want, mustGet(t, s, "sb-1"))

	// Backward and equal are no-ops.
	for _, when := range []time.Time{at(3), at(5), at(5).Add(-1), at(0)} {
		if err := s.Touch(ctx, "sb-1", when); err != nil {
			t.Fatalf("Touch(%v): %v", when, err)
		}
		expectSame(t, fmt.Sprintf("after Touch(%v)", when), &want, mustGet(t, s, "sb-1"))
	}
	// One nanosecond forward counts.
	if err := s.Touch(ctx, "sb-1", at(5).Add(1)); err != nil {
		t.Fatalf("Touch: %v", err)
	}
	if got := mustGet(t, s, "sb-1").LastActiveAt; !got.Equal(at(5).Add(1)) {
		t.Errorf("LastActiveAt = %v, want %v", got, at(5).Add(1))
	}
	if ev := mustEvents(t, s, "sb-1"); len(ev) != 1 {
		t.Errorf("Touch recorded events: %+v", ev)
	}
	// Other sandboxes are untouched.
	other := newSandbox("sb-2", "", api.StateRunning, at(2))
	mustCreate(t, s, other)
	if err := s.Touch(ctx, "sb-1", at(8)); err != nil {
		t.Fatalf("Touch: %v", err)
	}
	expectSame(t, "other sandbox after Touch", other, mustGet(t, s, "sb-2"))
}

func testEventsOrder(t *testing.T, s store.Store) {
	mustCreate(t, s, newSandbox("sb-1", "alpha", api.StateCreating, at(1)))
	mustCreate(t, s, newSandbox("sb-2", "beta", api.StateCreating, at(2)))
	steps := []struct {
		to     api.SandboxState
		reason string
	}{
		{api.StateRunning, "started"},
		{api.StateSuspending, "idle"},
		{api.StateSuspended, "snapshotted"},
		{api.StateResuming, "exec"},
		{api.StateRunning, "resumed"},
		{api.StateTerminated, "deleted"},
	}
	for i, st := range steps {
		mustUpdate(t, s, "sb-1", func(sb *store.Sandbox) error {
			sb.State, sb.StateReason = st.to, st.reason
			return nil
		})
		// Interleave another sandbox's history.
		if i == 2 {
			mustUpdate(t, s, "sb-2", func(sb *store.Sandbox) error { sb.State = api.StateError; sb.StateReason = "oops"; return nil })
		}
	}
	want := []store.Event{{SandboxID: "sb-1", From: "", To: api.StateCreating, Reason: "created by test"}}
	for _, st := range steps {
		want = append(want, store.Event{SandboxID: "sb-1", From: want[len(want)-1].To, To: st.to, Reason: st.reason})
	}
	ev := mustEvents(t, s, "sb-1")
	if d := cmp.Diff(want, ev, eventOpts); d != "" {
		t.Fatalf("events of sb-1 differ (-want +got):\n%s", d)
	}
	for i := 1; i < len(ev); i++ {
		if ev[i].ID <= ev[i-1].ID {
			t.Errorf("event %d id %d not after %d", i, ev[i].ID, ev[i-1].ID)
		}
	}
	want2 := []store.Event{
		{SandboxID: "sb-2", From: "", To: api.StateCreating, Reason: "created by test"},
		{SandboxID: "sb-2", From: api.StateCreating, To: api.StateError, Reason: "oops"},
	}
	if d := cmp.Diff(want2, mustEvents(t, s, "sb-2"), eventOpts); d != "" {
		t.Errorf("events of sb-2 differ (-want +got):\n%s", d)
	}
	if ev := mustEvents(t, s, "nope"); len(ev) != 0 {
		t.Errorf("Events(unknown) = %+v, want none", ev)
	}
}

func testConcurrentUpdates(t *testing.T, s store.Store) {
	const (
		workers = 16
		rounds  = 5
	)
	sb := newSandbox("sb-1", "alpha", api.StateRunning, at(1))
	sb.Spec.Labels = map[string]string{"n": "0"}
	sb.Runtime = json.RawMessage(`{"n":0}`)
	mustCreate(t, s, sb)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range rounds {
				_, err := s.Update(ctx, "sb-1", func(sb *store.Sandbox) error {
					n, err := strconv.Atoi(sb.Spec.Labels["n"])
					if err != nil {
						return err
					}
					sb.Spec.Labels["n"] = strconv.Itoa(n + 1)
					var rt struct{ N int }
					if err := json.Unmarshal(sb.Runtime, &rt); err != nil {
						return err
					}
					sb.Runtime = json.RawMessage(fmt.Sprintf(`{"n":%d}`, rt.N+1))
					sb.Spec.Env = map[string]string{"last": strconv.Itoa(w)}
					return nil
				})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Update: %v", err)
	}
	got := mustGet(t, s, "sb-1")
	if n := got.Spec.Labels["n"]; n != strconv.Itoa(workers*rounds) {
		t.Errorf("label counter = %s, want %d (lost updates)", n, workers*rounds)
	}
	var rt struct{ N int }
	if err := json.Unmarshal(got.Runtime, &rt); err != nil || rt.N != workers*rounds {
		t.Errorf("runtime counter = %s (%v), want %d (lost updates)", got.Runtime, err, workers*rounds)
	}
	if ev := mustEvents(t, s, "sb-1"); len(ev) != 1 {
		t.Errorf("events = %d, want 1: no state changed", len(ev))
	}

	// Concurrent state changes each leave exactly one event, and they chain.
	states := []api.SandboxState{api.StateSuspended, api.StateRunning}
	var wg2 sync.WaitGroup
	for range workers {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			_, err := s.Update(ctx, "sb-1", func(sb *store.Sandbox) error {
				if sb.State == states[0] {
					sb.State = states[1]
				} else {
					sb.State = states[0]
				}
				return nil
			})
			if err != nil {
				t.Errorf("concurrent state Update: %v", err)
			}
		}()
	}
	wg2.Wait()
	ev := mustEvents(t, s, "sb-1")
	if len(ev) != workers+1 {
		t.Fatalf("events = %d, want %d", len(ev), workers+1)
	}
	for i := 1; i < len(ev); i++ {
		if ev[i].From != ev[i-1].To {
			t.Errorf("event %d from %q, previous event to %q: history does not chain", i, ev[i].From, ev[i-1].To)
		}
	}
	if got := mustGet(t, s, "sb-1"); got.State != ev[len(ev)-1].To {
		t.Errorf("state %q, last event to %q", got.State, ev[len(ev)-1].To)
	}
}

func testTimePrecisionUTC(t *testing.T, s store.Store) {
	zone := time.FixedZone("UTC+05:30", 5*3600+1800)
	created := time.Date(2031, 12, 31, 23, 59, 59, 999999999, zone)
	active := time.Date(1999, 1, 2, 3, 4, 5, 1, zone)
	term := time.Date(2024, 2, 29, 12, 0, 0, 987654321, zone)
	// A time with a monotonic clock reading must still be stored as its
	// wall-clock instant.
	now := time.Now()

	sb := newSandbox("sb-1", "alpha", api.StateTerminated, created)
	sb.LastActiveAt = active
	sb.TerminatedAt = &term
	mustCreate(t, s, sb)
	mustCreate(t, s, newSandbox("sb-2", "", api.StateRunning, now))

	check := func(what string, got, want time.Time) {
		t.Helper()
		if !got.Equal(want) {
			t.Errorf("%s = %v, want %v (diff %v)", what, got, want, got.Sub(want))
		}
		if got.Location() != time.UTC {
			t.Errorf("%s location = %v, want UTC", what, got.Location())
		}
	}
	got := mustGet(t, s, "sb-1")
	check("CreatedAt", got.CreatedAt, created)
	check("LastActiveAt", got.LastActiveAt, active)
	if got.TerminatedAt == nil {
		t.Fatalf("TerminatedAt nil")
	}
	check("TerminatedAt", *got.TerminatedAt, term)
	got2 := mustGet(t, s, "sb-2")
	check("CreatedAt (monotonic)", got2.CreatedAt, now)

	// Through Update, Touch, List and Events too.
	t2 := time.Date(2032, 1, 1, 0, 0, 0, 1, zone)
	mustUpdate(t, s, "sb-1", func(sb *store.Sandbox) error { sb.TerminatedAt = &t2; sb.LastActiveAt = t2.Add(-1); return nil })
	if err := s.Touch(context.Background(), "sb-1", t2); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(context.Background(), store.ListFilter{Name: "alpha"})
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %v, %v", ids(list), err)
	}
	check("List CreatedAt", list[0].CreatedAt, created)
	check("List LastActiveAt after Touch", list[0].LastActiveAt, t2)
	check("List TerminatedAt after Update", *list[0].TerminatedAt, t2)
	for _, e := range mustEvents(t, s, "sb-1") {
		if e.At.Location() != time.UTC {
			t.Errorf("event %d At location = %v, want UTC", e.ID, e.At.Location())
		}
	}
}

func testSnapshots(t *testing.T, s store.Store) {
	ctx := context.Background()
	base := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	mk := func(id, sandbox, parent string, at time.Duration) *store.Snapshot {
		return &store.Snapshot{ID: id, Tenant: api.DefaultTenant, Name: "n-" + id, Type: "memory", SandboxID: sandbox, ParentID: parent, Image: "python",
			Spec: store.Spec{CPUs: 1.5, MemoryMB: 512, DiskMB: 1024, PIDsLimit: 128, TimeoutSecs: 600, MaxLifetimeSecs: 86400,
				AllowInternetAccess: true, Network: &api.NetworkPolicy{AllowOut: []string{"1.1.1.1"}, DenyOut: []string{"8.8.8.8"}},
				Env: map[string]string{"A": "b"}, Labels: map[string]string{"l": "v"}, NoAutoResume: true, UIDBase: 3 << 20,
				Ports: map[int]store.PortAccess{80: {Token: "t"}}, SuspendOnIdle: true,
				E2B: &store.E2BAccess{EnvdToken: "e", TrafficToken: "t", Template: "x", Contexts: map[string]string{"python": "c"}}},
			SizeBytes: 12345, Checksum: "abc", PausedMS: 42, CreatedAt: base.Add(at)}
	}
	a, b, c := mk("snap_a", "sbx_1", "", 0), mk("snap_b", "sbx_1", "snap_a", time.Second), mk("snap_c", "sbx_2", "", 2*time.Second)
	mustBeFull(t, "the snapshot", b)
	for _, sn := range []*store.Snapshot{a, b, c} {
		if err := s.CreateSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSnapshot(ctx, mk("snap_a", "sbx_9", "", 0)); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate snapshot id: %v", err)
	}
	got, err := s.GetSnapshot(ctx, "snap_b")
	if err != nil {
		t.Fatal(err)
	}
	if d := recordDiff(mk("snap_b", "sbx_1", "snap_a", time.Second), got); d != "" {
		t.Fatalf("GetSnapshot differs:%s", d)
	}
	if _, err := s.GetSnapshot(ctx, "snap_nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("GetSnapshot unknown: %v", err)
	}
	all, err := s.ListSnapshots(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if d := recordDiff([]*store.Snapshot{c, b, a}, all); d != "" {
		t.Fatalf("ListSnapshots all (newest first) differs:%s", d)
	}
	one, err := s.ListSnapshots(ctx, "sbx_1")
	if err != nil {
		t.Fatal(err)
	}
	if d := recordDiff([]*store.Snapshot{b, a}, one); d != "" {
		t.Fatalf("ListSnapshots sbx_1 differs:%s", d)
	}
	if err := s.DeleteSnapshot(ctx, "snap_a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSnapshot(ctx, "snap_a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.GetSnapshot(ctx, "snap_a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted snapshot still found: %v", err)
	}
}
