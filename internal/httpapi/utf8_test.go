package httpapi

import "testing"

func TestUTF8CarryKeepsSplitRunes(t *testing.T) {
	text := "héllo wörld ✓ 🙂 end"
	b := []byte(text)
	for size := 1; size <= 5; size++ {
		var c utf8Carry
		var got string
		for i := 0; i < len(b); i += size {
			end := min(i+size, len(b))
			chunk := c.take(b[i:end])
			for _, r := range chunk {
				if r == '\uFFFD' {
					t.Fatalf("size %d: chunk %q has a broken rune", size, chunk)
				}
			}
			got += chunk
		}
		got += c.flush()
		if got != text {
			t.Fatalf("size %d: %q, want %q", size, got, text)
		}
	}
}
