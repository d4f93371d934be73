package main

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// terminalWidth reports whether w is a terminal and, if so, its width in
// columns (0 when the terminal does not say).
func terminalWidth(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, false
	}
	return int(ws.Col), true
}
