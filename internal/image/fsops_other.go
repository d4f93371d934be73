//go:build !linux

package image

import "github.com/forkbox/forkbox/internal/errdefs"

func syncFS(string) error         { return errdefs.Unavailable("images need Linux") }
func swapIn(string, string) error { return errdefs.Unavailable("images need Linux") }

func (s *Store) lock() (func(), error) { return nil, errdefs.Unavailable("images need Linux") }
