package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// mixed holds characters of every UTF-8 length: 1 (a), 2 (é), 3 (€), 4 (🙂).
const mixed = "aé€🙂b"

// cutCase is a cut of s at n bytes and what it should keep.
type cutCase struct {
	s    string
	n    int
	want string
}

func checkCuts(t *testing.T, name string, cut func(string, int) string, cases []cutCase) {
	t.Helper()
	for _, c := range cases {
		if got := cut(c.s, c.n); got != c.want {
			t.Errorf("%s(%q, %d) = %q, want %q", name, c.s, c.n, got, c.want)
		}
	}
}

func TestPrefix(t *testing.T) {
	checkCuts(t, "Prefix", Prefix, []cutCase{
		{"", 0, ""},
		{"", 5, ""},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"abc", 2, "ab"},
		{"abc", 3, "abc"},
		{"abc", 10, "abc"},
		{mixed, 1, "a"},
		{mixed, 2, "a"}, // inside é
		{mixed, 3, "aé"},
		{mixed, 4, "aé"}, // inside €
		{mixed, 5, "aé"},
		{mixed, 6, "aé€"},
		{mixed, 7, "aé€"}, // inside 🙂, at each of its bytes
		{mixed, 8, "aé€"},
		{mixed, 9, "aé€"},
		{mixed, 10, "aé€🙂"},
		{mixed, 11, mixed},
		{"€", 1, ""}, // a limit under the first character keeps nothing
		{"€", 2, ""},
		{"🙂", 3, ""},
		// Not UTF-8: a run of continuation bytes is cut at the limit
		// once it is longer than a character can be.
		{"\x80\x80\x80\x80\x80\x80", 5, "\x80\x80\x80\x80\x80"},
		{"\x80\x80\x80", 2, ""},
		{"ab\xff\xfe", 3, "ab\xff"},
	})
}

func TestSuffix(t *testing.T) {
	checkCuts(t, "Suffix", Suffix, []cutCase{
		{"", 0, ""},
		{"", 5, ""},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"abc", 2, "bc"},
		{"abc", 10, "abc"},
		{mixed, 1, "b"},
		{mixed, 4, "b"}, // inside 🙂
		{mixed, 5, "🙂b"},
		{mixed, 6, "🙂b"}, // inside €
		{mixed, 8, "€🙂b"},
		{mixed, 9, "€🙂b"}, // inside é
		{mixed, 10, "é€🙂b"},
		{mixed, 11, mixed},
		{"€", 2, ""},
		{"\x80\x80\x80\x80\x80\x80", 5, "\x80\x80\x80\x80\x80"},
	})
}

// TestPrefixSuffixWhole cuts text of every kind of character at every limit:
// each piece is valid UTF-8, as long as it can be, and a prefix and the
// suffix of what is left put the text together again.
func TestPrefixSuffixWhole(t *testing.T) {
	s := strings.Repeat(mixed, 3)
	for n := 0; n <= len(s)+1; n++ {
		p, q := Prefix(s, n), Suffix(s, n)
		if !utf8.ValidString(p) || !utf8.ValidString(q) {
			t.Fatalf("n %d: %q, %q split a character", n, p, q)
		}
		if len(p) > n || len(q) > n || (n >= utf8.UTFMax && (len(p) <= n-utf8.UTFMax || len(q) <= n-utf8.UTFMax)) {
			t.Fatalf("n %d: prefix of %d bytes, suffix of %d", n, len(p), len(q))
		}
		if p+Suffix(s, len(s)-len(p)) != s {
			t.Fatalf("n %d: prefix %q and the rest do not make the text", n, p)
		}
	}
}

// TestPrefixProgress: with a limit of UTFMax bytes or more, any non-empty
// input, valid or not, gives a non-empty prefix, so a loop that takes
// pieces ends.
func TestPrefixProgress(t *testing.T) {
	for _, s := range []string{mixed, "🙂🙂", "\x80\x80\x80\x80\x80", "\xf0\x9f\x99\xf0\x9f\x99", "\xff\xff\xff\xff\xff"} {
		var pieces []string
		for rest := s; rest != ""; {
			p := Prefix(rest, utf8.UTFMax)
			if p == "" {
				t.Fatalf("%q: no progress at %q", s, rest)
			}
			pieces = append(pieces, p)
			rest = rest[len(p):]
		}
		if strings.Join(pieces, "") != s {
			t.Fatalf("%q: pieces %q", s, pieces)
		}
	}
}

func TestComplete(t *testing.T) {
	for in, want := range map[string]string{
		"":                 "",
		"abc":              "abc",
		"ab\xc3":           "ab", // the first byte of é
		"ab\xc3\xa9":       "ab\xc3\xa9",
		"a\xe2":            "a", // the first bytes of €
		"a\xe2\x82":        "a",
		"a\xe2\x82\xac":    "a\xe2\x82\xac",
		"\xf0":             "", // the first bytes of 🙂
		"\xf0\x9f":         "",
		"\xf0\x9f\x98":     "",
		"\xf0\x9f\x98\x82": "\xf0\x9f\x98\x82",
		"x\xf0\x9f\x98":    "x",
		// Bytes that are not UTF-8 and could not become a character with
		// more bytes are kept: a check of the text then refuses them.
		"caf\xff":           "caf\xff",
		"a\x80":             "a\x80",
		"a\x80\x80\x80\x80": "a\x80\x80\x80\x80",
		"a\xc3\xa9\xa9":     "a\xc3\xa9\xa9",
	} {
		if got := string(Complete([]byte(in))); got != want {
			t.Errorf("Complete(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCompleteStream carries what Complete holds back into the next chunk, as
// a streaming reader does: at every chunk size each chunk is valid text and
// together they are the input.
func TestCompleteStream(t *testing.T) {
	text := []byte(strings.Repeat(mixed+" héllo wörld ✓ ", 3))
	for size := 1; size <= 7; size++ {
		var pending, got []byte
		for i := 0; i < len(text); i += size {
			buf := append(pending, text[i:min(i+size, len(text))]...)
			whole := Complete(buf)
			if !utf8.Valid(whole) {
				t.Fatalf("size %d: chunk %q is not valid", size, whole)
			}
			got = append(got, whole...)
			pending = append([]byte(nil), buf[len(whole):]...)
		}
		if got = append(got, pending...); string(got) != string(text) {
			t.Fatalf("size %d: %q, want %q", size, got, text)
		}
	}
}
