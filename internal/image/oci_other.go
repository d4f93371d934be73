//go:build !linux

package image

import (
	"archive/tar"
	"context"

	"github.com/forkbox/forkbox/internal/errdefs"
)

// extractTar needs Linux: openat2, mknod, overlayfs xattrs.
func extractTar(context.Context, *tar.Reader, string, ExtractOptions) error {
	return errdefs.Unavailable("extracting archives needs Linux")
}

// isOpaqueDir reports false: layers are only ever extracted on Linux.
func isOpaqueDir(string) bool { return false }
