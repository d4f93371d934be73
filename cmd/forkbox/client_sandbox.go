package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/image"
	"github.com/forkbox/forkbox/internal/sandbox"
)

func createCmd() *cobra.Command {
	var (
		req               api.CreateSandboxRequest
		noAutoResume      bool
		cpus              float64
		pids              int64
		memory            = mibFlag{name: "memory"}
		disk              = mibFlag{name: "disk"}
		timeout, lifetime secondsFlag
		env, labels       []string
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Long: `Create a sandbox and print its id.

A sandbox without --name is ephemeral: it is terminated when it has been idle
for --timeout. A named sandbox is suspended instead and keeps its state.

With --snapshot the sandbox starts from a snapshot (see forkbox checkpoint and
forkbox snapshots) instead of an image: a memory snapshot is a warm start with
its processes and kernel variables back; limits not given are the snapshot's.

With --pool the sandbox is taken from a warm pool (see forkbox pool): a ready
sandbox is handed out at once, with --name and --label applied; when the pool
is empty, one is restored as usual.

A suspended sandbox (see forkbox suspend) is resumed by the next call that
needs it running; with --no-auto-resume such calls fail instead, until
forkbox resume.

Limits not given are the daemon's defaults (shown below for a daemon with
its built-in ones; an operator may have set others), lowered to what the
host has. Sizes take binary units: --memory 512M, 1G, 1.5G, 512MiB; a plain
number is MiB.`,
		Example: `  forkbox create
  forkbox create --name analysis --cpus 2 --memory 2G --timeout 30m --label team=data
  SB=$(forkbox create) && forkbox exec $SB -- python3 -c 'print(6*7)'
  forkbox create --snapshot snap_0123456789ab --name analysis-2
  forkbox create --pool warm --name session-42`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if f.Changed("cpus") {
				req.CPUs = &cpus
			}
			if f.Changed("memory") {
				req.MemoryMB = &memory.mib
			}
			if f.Changed("disk") {
				req.DiskMB = &disk.mib
			}
			if f.Changed("pids") {
				req.PIDsLimit = &pids
			}
			if f.Changed("timeout") {
				s := wholeSeconds(timeout.secs)
				req.TimeoutSecs = &s
			}
			if f.Changed("max-lifetime") {
				s := wholeSeconds(lifetime.secs)
				req.MaxLifetimeSecs = &s
			}
			if req.Pool != "" && (req.SnapshotID != "" || req.Image != "") {
				return fmt.Errorf("create: a --pool sandbox comes from the pool's own snapshot or image; drop --snapshot and --image")
			}
			if noAutoResume {
				autoResume := false
				req.AutoResume = &autoResume
			}
			var err error
			if req.Env, err = parseKV("env", env); err != nil {
				return err
			}
			if req.Labels, err = parseKV("label", labels); err != nil {
				return err
			}
			msg := "Creating a sandbox"
			switch {
			case req.Pool != "":
				msg = "Taking a sandbox from pool " + req.Pool
			case req.SnapshotID != "":
				msg = "Restoring snapshot " + req.SnapshotID
			}
			p := startProgress(cmd, msg)
			sb, err := c.CreateSandbox(ctx, req)
			p.Stop()
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), sb)
			}
			fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "unique name; a named sandbox is suspended, not terminated, when idle")
	f.StringVar(&req.Image, "image", "", fmt.Sprintf("image to start from (default: the daemon's, %q)", image.DefaultImage))
	f.StringVar(&req.SnapshotID, "snapshot", "", "snapshot id to restore instead of an image")
	f.StringVar(&req.Pool, "pool", "", "take a ready sandbox from the warm pool `NAME` (see forkbox pool)")
	f.BoolVar(&noAutoResume, "no-auto-resume", false, "do not resume the sandbox by itself when a call needs it while it is suspended")
	d := sandbox.DefaultDefaults
	f.Float64Var(&cpus, "cpus", 0, fmt.Sprintf("CPU limit, fractional (e.g. 0.5) (default: the daemon's, %s)", plural(int(d.CPUs), "CPU", "CPUs")))
	f.Var(&memory, "memory", fmt.Sprintf("memory limit: 512M, 1G, 1.5G or MiB (default: the daemon's, %s)", humanMiB(d.MemoryMB)))
	f.Var(&disk, "disk", fmt.Sprintf("writable disk size: 512M, 4G or MiB (default: the daemon's, %s)", humanMiB(d.DiskMB)))
	f.Int64Var(&pids, "pids", 0, fmt.Sprintf("maximum number of processes (default: the daemon's, %d)", d.PIDsLimit))
	f.Var(&timeout, "timeout", fmt.Sprintf("idle timeout: seconds or a duration like 10m (default: the daemon's, %s)",
		humanSecs(d.TimeoutSecs)))
	f.Var(&lifetime, "max-lifetime", "terminate after this long regardless of activity: seconds or a duration (default: none)")
	f.BoolVar(&req.AllowInternetAccess, "internet", false, "allow outbound network access")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `K=V` (repeatable)")
	f.StringArrayVarP(&labels, "label", "l", nil, "label `K=V` (repeatable)")
	sizeFlagErrors(cmd)
	return cmd
}

// wholeSeconds rounds a positive fraction of a second up, so "--timeout 500ms"
// does not become 0 (which the daemon would read as unset or invalid).
func wholeSeconds(s float64) int64 {
	n := int64(s)
	if float64(n) < s {
		n++
	}
	return n
}

func lsCmd() *cobra.Command {
	var (
		opts   client.ListOptions
		state  string
		labels []string
		all    bool
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Long: `List the sandboxes that are in use, newest first: terminated sandboxes and
the ready sandboxes of warm pools (not handed out yet) are hidden, and said
so at the end; --all lists them too (the daemon keeps terminated sandboxes'
records for serve --retain-terminated, a week by default). --state lists the
sandboxes in that state, terminated ones included. --json prints the same
selection. The daemon answers lists by pages; ls asks for every page
(--page-size sets how many sandboxes a request asks for).`,
		Example: `  forkbox ls
  forkbox ls --all
  forkbox ls --state running --label team=data`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			opts.State = api.SandboxState(state)
			opts.Labels = make(map[string]string, len(labels))
			for _, l := range labels {
				// k=v like everywhere else in the CLI; k:v as on the wire.
				k, v, ok := strings.Cut(l, "=")
				if !ok {
					k, v, ok = strings.Cut(l, ":")
				}
				if !ok || k == "" {
					return fmt.Errorf("--label %q: want KEY=VALUE", l)
				}
				opts.Labels[k] = v
			}
			opts.IncludeTerminated = all
			list, err := c.ListSandboxes(ctx, opts)
			if err != nil {
				return err
			}
			shown, hidden := list.Sandboxes, hiddenCount{}
			if !all {
				shown, hidden = visibleSandboxes(list.Sandboxes, opts.State)
				if opts.State == "" {
					// The daemon left the terminated ones out: one
					// item of theirs says whether there are any.
					term := opts
					term.State = api.StateTerminated
					ended, err := c.ListSandboxesPage(ctx, term, client.Page{Limit: 1})
					if err != nil {
						return err
					}
					hidden.terminated = hidden.terminated || len(ended.Sandboxes) > 0
				}
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), api.SandboxList{Sandboxes: append([]api.Sandbox{}, shown...)})
			}
			printSandboxTable(cmd.OutOrStdout(), shown, time.Now())
			if msg := hidden.String(); msg != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), msg)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.BoolVarP(&all, "all", "a", false, "also list terminated sandboxes and the ready sandboxes of warm pools")
	f.StringVar(&state, "state", "", "only sandboxes in this state (running, suspended, terminated, …)")
	f.StringVar(&opts.Name, "name", "", "only the sandbox with this name")
	f.StringArrayVarP(&labels, "label", "l", nil, "only sandboxes with label `K=V` (repeatable)")
	return cmd
}

// poolMember is the pool whose ready sandbox sb is, not handed out yet
// ("" for none): the daemon labels those sandboxes (see package sandbox's
// PoolLabel and PoolReadyLabel) until a create takes one.
func poolMember(sb api.Sandbox) string {
	if sb.Labels[sandbox.PoolReadyLabel] != "true" {
		return ""
	}
	return sb.Labels[sandbox.PoolLabel]
}

// hiddenCount is what forkbox ls leaves out without --all: terminated
// sandboxes (whether there are any: the daemon leaves them out, and ls
// does not count them) and the ready members of warm pools.
type hiddenCount struct {
	terminated bool
	pooled     int
}

func (h hiddenCount) String() string {
	var parts []string
	if h.terminated {
		parts = append(parts, "terminated sandboxes")
	}
	if h.pooled > 0 {
		parts = append(parts, fmt.Sprintf("%d ready in warm pools", h.pooled))
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, " and ") + " hidden; --all shows them"
}

// visibleSandboxes drops the terminated sandboxes (unless state asks for
// them) and the unclaimed pool members, and counts what it dropped.
func visibleSandboxes(sbs []api.Sandbox, state api.SandboxState) ([]api.Sandbox, hiddenCount) {
	var (
		shown  []api.Sandbox
		hidden hiddenCount
	)
	for _, sb := range sbs {
		switch {
		case sb.State == api.StateTerminated && state != api.StateTerminated:
			hidden.terminated = true
		case poolMember(sb) != "" && sb.State != api.StateTerminated:
			hidden.pooled++
		default:
			shown = append(shown, sb)
		}
	}
	return shown, hidden
}

func printSandboxTable(w io.Writer, sbs []api.Sandbox, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tIMAGE\tCPUS\tMEM\tAGE")
	for _, sb := range sbs {
		state := string(sb.State)
		if p := poolMember(sb); p != "" && sb.State != api.StateTerminated {
			state += " (ready in pool " + p + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			sb.ID, orDash(sb.Name), state, orDash(sb.Image),
			strconv.FormatFloat(sb.CPUs, 'f', -1, 64), humanMiB(sb.MemoryMB), humanAge(now, sb.CreatedAt))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanSecs formats whole seconds: 90s, 5m, 2h, 1h30m.
func humanSecs(secs int64) string {
	d := time.Duration(secs) * time.Second
	switch {
	case secs%3600 == 0 && secs > 0:
		return fmt.Sprintf("%dh", secs/3600)
	case secs%60 == 0 && secs > 0:
		return fmt.Sprintf("%dm", secs/60)
	case secs < 60:
		return fmt.Sprintf("%ds", secs)
	}
	return d.String()
}

// humanAge formats the time since t: 45s, 12m, 5h, 3d.
func humanAge(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func rmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm SANDBOX...",
		Aliases: []string{"terminate"},
		Short:   "Terminate sandboxes and free everything they hold",
		Example: `  forkbox rm sbx_0123456789ab analysis`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("rm: name at least one SANDBOX (id or name)")
			}
			return nil
		},
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			var (
				done   []api.Sandbox
				failed int
				last   error
			)
			for _, name := range args {
				sb, err := c.DeleteSandbox(ctx, name)
				if err != nil {
					if ctx.Err() != nil {
						return err
					}
					failed++
					last = err
					if len(args) > 1 {
						fmt.Fprintf(cmd.ErrOrStderr(), "forkbox: %s\n", itemError(name, err))
					}
					continue
				}
				done = append(done, *sb)
				if !clientFlags.json {
					fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
				}
			}
			if clientFlags.json {
				if err := printJSON(cmd.OutOrStdout(), api.SandboxList{Sandboxes: append([]api.Sandbox{}, done...)}); err != nil {
					return err
				}
			}
			switch {
			case failed == 0:
				return nil
			case len(args) == 1:
				return last
			}
			return fmt.Errorf("%d of %d sandboxes not removed", failed, len(args))
		}),
	}
}
