package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// TestPTYSizeCheck: columns and rows are 1 to MaxPTYSize each.
func TestPTYSizeCheck(t *testing.T) {
	for _, sz := range []PTYSize{{1, 1}, {80, 24}, {MaxPTYSize, MaxPTYSize}} {
		if err := sz.Check(); err != nil {
			t.Errorf("%+v: %v", sz, err)
		}
	}
	for _, sz := range []PTYSize{{0, 24}, {80, 0}, {MaxPTYSize + 1, 24}, {80, MaxPTYSize + 1}, {65535, 65535}} {
		if err := sz.Check(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want invalid argument", sz, err)
		}
	}
}

// FuzzMergeEnv checks MergeEnv on environments from API clients and images
// (newline-separated here): every variable appears once, with the value of
// its last entry in b, else its last entry in a, at the place of its first
// appearance.
func FuzzMergeEnv(f *testing.F) {
	f.Add("PATH=/bin\nHOME=/home/user\nA=1", "A=2\nB=3\nA=4")
	f.Add("", "=x\nnoequals\nK==v")
	f.Add("A=1\nA=2", "")
	f.Fuzz(func(t *testing.T, as, bs string) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, "\n")
		}
		a, b := split(as), split(bs)
		got := MergeEnv(a, b)
		want := map[string]string{}
		var order []string
		for _, kv := range append(append([]string(nil), a...), b...) {
			k, _, _ := strings.Cut(kv, "=")
			if _, ok := want[k]; !ok {
				order = append(order, k)
			}
			want[k] = kv
		}
		if len(got) != len(order) {
			t.Fatalf("MergeEnv(%q, %q) = %q: %d entries, want %d", a, b, got, len(got), len(order))
		}
		for i, k := range order {
			if got[i] != want[k] {
				t.Fatalf("MergeEnv(%q, %q) = %q: entry %d is %q, want %q", a, b, got, i, got[i], want[k])
			}
		}
	})
}
