package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// A progress line is what a client command shows on stderr while it waits
// for a slow call (a memory checkpoint, a fork, a restore): a spinner, what
// is happening and the time so far, redrawn in place. It is drawn only when
// stderr is a terminal (and TERM is not "dumb") and --json is not set, and
// only once the call has taken progressDelay, so scripts, pipes and quick
// calls see nothing.

var (
	progressDelay    = 300 * time.Millisecond
	progressInterval = 100 * time.Millisecond
	// stderrTerminal reports whether w is a terminal, and its width; tests
	// replace it.
	stderrTerminal = terminalWidth
)

type progress struct {
	w        io.Writer
	msg      string
	width    int
	frames   []string
	ellipsis string
	start    time.Time
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	drawn    bool // set by the drawing goroutine; read after done is closed
}

// startProgress starts a progress line saying msg on cmd's stderr, or
// returns nil (whose methods do nothing) when no progress is to be shown.
func startProgress(cmd *cobra.Command, msg string) *progress {
	w := cmd.ErrOrStderr()
	width, tty := stderrTerminal(w)
	if clientFlags.json || !tty || os.Getenv("TERM") == "dumb" {
		return nil
	}
	p := &progress{w: w, msg: msg, width: width, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	if utf8Locale() {
		p.frames, p.ellipsis = strings.Split("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏", ""), "…"
	} else {
		p.frames, p.ellipsis = []string{"|", "/", "-", `\`}, "..."
	}
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.done)
	delay := time.NewTimer(progressDelay)
	defer delay.Stop()
	select {
	case <-p.stop:
		return
	case <-delay.C:
	}
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	for i := 0; ; i++ {
		line := p.frames[i%len(p.frames)] + " " + p.msg + p.ellipsis + " " + elapsed(time.Since(p.start))
		if p.width > 1 {
			line = truncate(line, p.width-1) // a wrapped line could not be redrawn in place
		}
		fmt.Fprint(p.w, "\r\x1b[K"+line)
		p.drawn = true
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
	}
}

// Stop erases the progress line and returns how long it ran. It may be
// called more than once.
func (p *progress) Stop() time.Duration {
	if p == nil {
		return 0
	}
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		if p.drawn {
			fmt.Fprint(p.w, "\r\x1b[K")
		}
	})
	return time.Since(p.start)
}

// Done stops p and prints a summary line, followed by " in" and the time
// taken. Like the progress line, the summary is only for a terminal.
func (p *progress) Done(format string, args ...any) {
	if p == nil {
		return
	}
	d := p.Stop()
	fmt.Fprintf(p.w, format+" in %s\n", append(args, elapsed(d))...)
}

// elapsed formats a duration as 0.4s, 12.3s, 2m05s.
func elapsed(d time.Duration) string {
	if r := d.Round(100 * time.Millisecond); r < time.Minute {
		return fmt.Sprintf("%.1fs", r.Seconds())
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

// truncate cuts s to at most n runes.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// utf8Locale reports whether the locale's character set is UTF-8, as the
// first of LC_ALL, LC_CTYPE and LANG that is set says.
func utf8Locale() bool {
	for _, k := range []string{"LC_ALL", "LC_CTYPE", "LANG"} {
		if v := strings.ToLower(os.Getenv(k)); v != "" {
			return strings.Contains(v, "utf-8") || strings.Contains(v, "utf8")
		}
	}
	return false
}
