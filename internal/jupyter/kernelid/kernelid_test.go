package kernelid

import (
	"encoding/base32"
	"strings"
	"testing"
)

func TestRoundTripAndRefusals(t *testing.T) {
	sb := "sbx_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte("twelve bytes")))
	for _, ctx := range []uint32{0, 1, 0xdeadbeef, ^uint32(0)} {
		id, err := Format(sb, ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(id) != 36 || strings.Count(id, "-") != 4 {
			t.Fatalf("%q is not UUID-shaped", id)
		}
		gotSB, gotCtx, ok := Parse(id)
		if !ok || gotSB != sb || gotCtx != ctx {
			t.Fatalf("Parse(%q) = %q %d %v, want %q %d", id, gotSB, gotCtx, ok, sb, ctx)
		}
	}
	for _, bad := range []string{"", "sbx_", "snap_aaaaaaaaaaaaaaaaaaaa", "sbx_short", "sbx_" + strings.Repeat("1", 20)} {
		if _, err := Format(bad, 0); err == nil {
			t.Errorf("Format(%q) made an id", bad)
		}
	}
	for _, bad := range []string{"", "not-a-kernel", "0123456789abcdef0123456789abcdef0123", "01234567-89ab-cdef-0123-456789abcdeg", "01234567_89ab-cdef-0123-456789abcdef"} {
		if _, _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}
