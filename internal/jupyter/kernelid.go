package jupyter

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/forkbox/forkbox/internal/errdefs"
	"github.com/forkbox/forkbox/internal/jupyter/kernelid"
)

// Kernel ids: see package kernelid.

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
func (k kernelRef) id() (string, error) { return kernelid.Format(k.sandbox, k.ctx) }

// parseKernelID reads a kernel id; anything else is a 404, as for a kernel
// that does not exist.
func parseKernelID(id string) (kernelRef, error) {
	sandbox, ctx, ok := kernelid.Parse(id)
	if !ok {
		return kernelRef{}, errdefs.NotFound("kernel %q not found", id)
	}
	return kernelRef{sandbox: sandbox, ctx: ctx}, nil
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
