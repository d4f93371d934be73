package units

import (
	"math"
	"testing"
)

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{18, "18 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1025, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{4096, "4.0 KiB"},
		{1<<20 - 1, "1.0 MiB"}, // not "1024.0 KiB"
		{1<<20 - 52, "1023.9 KiB"},
		{1 << 20, "1.0 MiB"},
		{50 << 20, "50.0 MiB"},
		{412 << 20, "412.0 MiB"},
		{12_900_000, "12.3 MiB"},
		{1<<30 - 1, "1.0 GiB"},
		{3 << 30, "3.0 GiB"},
		{1 << 40, "1.0 TiB"},
		{5 << 50, "5.0 PiB"},
		{1 << 60, "1.0 EiB"},
		{math.MaxInt64, "8.0 EiB"},
		{-1, "-1 B"},
		{-4096, "-4096 B"},
	} {
		if got := Bytes(c.n); got != c.want {
			t.Errorf("Bytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
