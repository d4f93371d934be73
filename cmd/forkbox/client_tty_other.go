//go:build !linux

package main

import "io"

// terminalWidth reports whether w is a terminal. Off Linux it says no, so
// the client commands draw no progress there.
func terminalWidth(io.Writer) (int, bool) { return 0, false }
