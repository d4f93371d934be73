//go:build !linux

package diskspace

import "github.com/forkbox/forkbox/internal/errdefs"

// Of measures the filesystem holding path: on Linux only.
func Of(path string) (Room, error) {
	return Room{Path: path}, errdefs.Unavailable("disk space: Linux only")
}
