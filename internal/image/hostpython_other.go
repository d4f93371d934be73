//go:build !linux

package image

import (
	"context"

	"github.com/forkbox/forkbox/internal/errdefs"
)

func (s *Store) buildHostPython(ctx context.Context) (*Image, error) {
	return nil, errdefs.Unavailable("the host python image can only be built on Linux")
}
