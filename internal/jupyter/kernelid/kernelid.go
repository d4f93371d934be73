// Package kernelid encodes and decodes the Jupyter gateway's kernel ids. A
// kernel id names a context in a sandbox and nothing else: it is the sandbox
// id's 12 random bytes followed by 4 bytes naming the context, as a
// UUID-shaped string (Jupyter's servers route only ids of five
// dash-separated words). Context number 0 is the sandbox's default Python
// context — the one forkbox's own /code, the analyst and a warm pool's
// prestarted kernel use — and any other number n is the context "ctx_" +
// 8 hex digits of n that the gateway created. So an id needs no table to
// resolve: it survives daemon restarts, a fork's branch has ids of its own,
// whose it is follows from whose the sandbox is, and a node of a cluster
// knows from the id alone which sandbox (so which node) a kernel call is
// about. It is a package of its own so that the cluster's router can read
// ids without linking the gateway.
package kernelid

import (
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
)

var sandboxB32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// Format returns the kernel id of context ctx of sandbox ("sbx_…").
func Format(sandbox string, ctx uint32) (string, error) {
	raw, ok := strings.CutPrefix(sandbox, "sbx_")
	if !ok {
		return "", fmt.Errorf("sandbox id %q has no sbx_ prefix", sandbox)
	}
	b, err := sandboxB32.DecodeString(strings.ToUpper(raw))
	if err != nil || len(b) != 12 {
		return "", fmt.Errorf("sandbox id %q is not 12 base32 bytes", sandbox)
	}
	var all [16]byte
	copy(all[:], b)
	binary.BigEndian.PutUint32(all[12:], ctx)
	h := hex.EncodeToString(all[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// Parse reads a kernel id: the sandbox and the context number it names; ok
// is false for anything that is not one.
func Parse(id string) (sandbox string, ctx uint32, ok bool) {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return "", 0, false
	}
	b, err := hex.DecodeString(strings.ReplaceAll(id, "-", ""))
	if err != nil || len(b) != 16 {
		return "", 0, false
	}
	return "sbx_" + strings.ToLower(sandboxB32.EncodeToString(b[:12])), binary.BigEndian.Uint32(b[12:]), true
}
