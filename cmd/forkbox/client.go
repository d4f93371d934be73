package main

// The client commands (create, ls, exec, run, contexts, context, cp, rm,
// suspend, resume, checkpoint, fork, snapshots, snapshot, pool, image, port,
// key, tenant, usage, audit) talk to a
// daemon over HTTP through the Go SDK in package client; nothing here knows
// the wire format.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/errdefs"
)

// clientFlags are the root's persistent flags that every client command uses.
var clientFlags struct {
	url      string
	apiKey   string
	json     bool
	pageSize int
}

// addClientFlags adds --url, --api-key and --json to root.
func addClientFlags(root *cobra.Command) {
	def := os.Getenv(client.EnvURL)
	if def == "" {
		def = client.DefaultURL
	}
	pf := root.PersistentFlags()
	pf.StringVar(&clientFlags.url, "url", def, "address of the forkbox daemon (env "+client.EnvURL+")")
	// The key's value is never shown as a default in --help.
	pf.StringVar(&clientFlags.apiKey, "api-key", "", "API key for the daemon (default $"+client.EnvAPIKey+")")
	pf.BoolVar(&clientFlags.json, "json", false, "print results as JSON")
	pf.IntVar(&clientFlags.pageSize, "page-size", 0,
		"items per request when a command lists (ls, snapshots, image ls, …), 1 to 1000 (default 1000); every page is listed whatever the size")
}

// clientCmds returns the commands that talk to a daemon.
func clientCmds() []*cobra.Command {
	return []*cobra.Command{createCmd(), lsCmd(), execCmd(), runCmd(), contextsCmd(), contextCmd(), cpCmd(), rmCmd(),
		suspendCmd(), resumeCmd(), checkpointCmd(), forkCmd(), snapshotsCmd(), snapshotCmd(), poolCmd(), imageCmd(), portCmd(),
		keyCmd(), tenantCmd(), usageCmd(), auditCmd(), nodesCmd()}
}

// newClient builds a client from the persistent flags.
func newClient() *client.Client {
	key := clientFlags.apiKey
	if key == "" {
		key = os.Getenv(client.EnvAPIKey)
	}
	return client.New(clientFlags.url, client.WithAPIKey(key), client.WithPageLimit(clientFlags.pageSize))
}

// run adapts a client command: it gives fn a context that Ctrl-C and SIGTERM
// cancel, and turns the errors users hit most into advice.
func run(fn func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return explain(fn(ctx, newClient(), cmd, args))
	}
}

// explain adds a hint to errors whose fix is not obvious from the message.
func explain(err error) error {
	var (
		ue *url.Error
		oe *net.OpError
		ae *client.APIError
	)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return errInterrupted
	case errors.As(err, &ue) && errors.As(err, &oe) && oe.Op == "dial":
		return fmt.Errorf("cannot reach the forkbox daemon at %s (is `forkbox serve` running? set --url or %s): %w",
			clientFlags.url, client.EnvURL, unwrapDial(oe))
	case errors.Is(err, errdefs.ErrUnauthenticated):
		return fmt.Errorf("%w (set --api-key or %s)", err, client.EnvAPIKey)
	case errors.As(err, &ae) && ae.Quota != nil:
		return &quotaError{err: err, q: ae.Quota}
	case errors.As(err, &ae) && errors.Is(err, errdefs.ErrNotFound):
		if hint := notFoundHint(ae.Message); hint != "" && !strings.Contains(err.Error(), hint) {
			return fmt.Errorf("%w; %s", err, hint)
		}
	}
	return err
}

// notFoundHint is the command that lists what a not-found message names
// (`sandbox "x" not found`), or "".
func notFoundHint(msg string) string {
	kind, _, _ := strings.Cut(msg, " ")
	if !strings.HasSuffix(msg, " not found") {
		return ""
	}
	switch kind {
	case "sandbox":
		return "forkbox ls --all lists the sandboxes"
	case "image":
		return "forkbox image ls lists the images"
	case "snapshot":
		return "forkbox snapshots lists the snapshots"
	case "pool":
		return "forkbox pool ls lists the pools"
	}
	return ""
}

// itemError formats the failure of one item of a command that takes many
// (rm a b c): "item: message", unless the message names the item already.
func itemError(item string, err error) string {
	msg := explain(err).Error()
	if strings.Contains(msg, item) {
		return msg
	}
	return item + ": " + msg
}

// unwrapDial drops the "dial tcp 127.0.0.1:8080:" prefix that the hint repeats.
func unwrapDial(oe *net.OpError) error {
	if oe.Err != nil {
		return oe.Err
	}
	return oe
}

var errInterrupted = errors.New("interrupted")

// exitError makes the process exit with code; the message (if any) is what
// main prints after "forkbox: ".
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// exitCode is the process exit status for an error returned by a command:
// the remote command's status for exec, 130 after Ctrl-C, otherwise 1.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		if ee.code < 1 || ee.code > 255 {
			return 1
		}
		return ee.code
	case errors.Is(err, errInterrupted):
		return 130
	}
	return 1
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// parseKV parses repeated K=V flags into a map.
func parseKV(flag string, items []string) (map[string]string, error) {
	if len(items) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(items))
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", flag, it)
		}
		m[k] = v
	}
	return m, nil
}

// secondsFlag is a duration flag that takes plain seconds ("90", "1.5") or a
// Go duration ("10m", "1h30m", "500ms").
type secondsFlag struct{ secs float64 }

func (f *secondsFlag) String() string {
	if f.secs == 0 {
		return ""
	}
	return strconv.FormatFloat(f.secs, 'f', -1, 64)
}

func (f *secondsFlag) Set(s string) error {
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		f.secs = v
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want seconds or a duration like 90s, 10m, 1h")
	}
	f.secs = d.Seconds()
	return nil
}

func (f *secondsFlag) Type() string { return "seconds" }
