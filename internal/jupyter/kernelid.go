package jupyter

import (
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// A kernel id names a context in a sandbox and nothing else: it is the
// sandbox id's 12 random bytes followed by 4 bytes naming the context, as a
// UUID-shaped string (Jupyter's servers route only ids of five
// dash-separated words). Context number 0 is the sandbox's default Python
// context — the one forkbox's own /code, the analyst and a warm pool's
// prestarted kernel use — and any other number n is the context "ctx_" +
// 8 hex digits of n that the gateway created. So an id needs no table to
// resolve: it survives daemon restarts, a fork's branch has ids of its own,
// and whose it is follows from whose the sandbox is.

var sandboxB32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// kernelRef is what a kernel id names.
type kernelRef struct {
	sandbox string // "sbx_…"
	ctx     uint32 // 0: the default Python context
}

// contextRef is the context as the sandbox API names it.
func (k kernelRef) contextRef() string {
	if k.ctx == 0 {
		return "default"
	}
	return fmt.Sprintf("ctx_%08x", k.ctx)
}

// id is the kernel id of k.
func (k kernelRef) id() (string, error) {
	raw, ok := strings.CutPrefix(k.sandbox, "sbx_")
	if !ok {
		return "", fmt.Errorf("sandbox id %q has no sbx_ prefix", k.sandbox)
	}
	b, err := sandboxB32.DecodeString(strings.ToUpper(raw))
	if err != nil || len(b) != 12 {
		return "", fmt.Errorf("sandbox id %q is not 12 base32 bytes", k.sandbox)
	}
	var all [16]byte
	copy(all[:], b)
	binary.BigEndian.PutUint32(all[12:], k.ctx)
	h := hex.EncodeToString(all[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// parseKernelID reads a kernel id; anything else is a 404, as for a kernel
// that does not exist.
func parseKernelID(id string) (kernelRef, error) {
	notFound := errdefs.NotFound("kernel %q not found", id)
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return kernelRef{}, notFound
	}
	b, err := hex.DecodeString(strings.ReplaceAll(id, "-", ""))
	if err != nil || len(b) != 16 {
		return kernelRef{}, notFound
	}
	return kernelRef{
		sandbox: "sbx_" + strings.ToLower(sandboxB32.EncodeToString(b[:12])),
		ctx:     binary.BigEndian.Uint32(b[12:]),
	}, nil
}

// parseContextRef reads a context id the gateway made ("ctx_" and 8 hex
// digits); ok is false for any other.
func parseContextRef(s string) (uint32, bool) {
	h, ok := strings.CutPrefix(s, "ctx_")
	if !ok || len(h) != 8 {
		return 0, false
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return 0, false
	}
	n := binary.BigEndian.Uint32(b)
	return n, n != 0
}
