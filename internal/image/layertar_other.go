//go:build !linux

package image

import (
	"context"
	"io"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// writeLayerTar needs Linux: layers hold overlayfs's own metadata.
func writeLayerTar(context.Context, string, io.Writer) error {
	return errdefs.Unavailable("layer tars need Linux")
}

// extractLayerTar needs Linux: layers hold overlayfs's own metadata.
func extractLayerTar(context.Context, io.Reader, string) error {
	return errdefs.Unavailable("layer tars need Linux")
}
