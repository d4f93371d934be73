// Package textcut cuts UTF-8 text at a byte limit without splitting a
// character: outputs, logs, titles and file heads are bounded in bytes, but
// what is kept of them must stay valid text (a split rune becomes U+FFFD in
// JSON, or makes a check for UTF-8 fail).
//
// Only valid UTF-8 has characters to keep whole. In bytes that are not valid
// UTF-8 a cut moves at most utf8.UTFMax-1 bytes from the limit, so a cut at a
// limit of utf8.UTFMax bytes or more always keeps something of a non-empty
// input, and a loop that takes pieces of text always makes progress.
package textcut

import "unicode/utf8"

// Prefix returns the longest prefix of s of at most n bytes that does not
// end inside a character.
func Prefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	if n <= 0 {
		return ""
	}
	for i := n; i > n-utf8.UTFMax; i-- {
		if i == 0 || utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:n]
}

// Suffix returns the longest suffix of s of at most n bytes that does not
// start inside a character.
func Suffix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	if n <= 0 {
		return ""
	}
	start := len(s) - n
	for i := start; i < start+utf8.UTFMax; i++ {
		if i == len(s) || utf8.RuneStart(s[i]) {
			return s[i:]
		}
	}
	return s[start:]
}

// Complete returns b without an incomplete character at its end: the first
// bytes of a multi-byte UTF-8 sequence whose remaining bytes a limit or a
// read cut off (and may still come). Anything else, invalid bytes included,
// is kept.
func Complete(b []byte) []byte {
	// An incomplete sequence is at most UTFMax-1 bytes: its start and the
	// continuation bytes after it.
	for i := len(b) - 1; i >= 0 && i >= len(b)-(utf8.UTFMax-1); i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			return b
		}
	}
	return b
}
