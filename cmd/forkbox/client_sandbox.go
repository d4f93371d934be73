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
)

func createCmd() *cobra.Command {
	var (
		req                api.CreateSandboxRequest
		noAutoResume       bool
		cpus               float64
		memory, disk, pids int64
		timeout, lifetime  secondsFlag
		env, labels        []string
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
forkbox resume.`,
		Example: `  forkbox create
  forkbox create --name analysis --cpus 2 --memory 2048 --timeout 30m --label team=data
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
				req.MemoryMB = &memory
			}
			if f.Changed("disk") {
				req.DiskMB = &disk
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
	f.StringVar(&req.Image, "image", "", `image to start from (default "python")`)
	f.StringVar(&req.SnapshotID, "snapshot", "", "snapshot id to restore instead of an image")
	f.StringVar(&req.Pool, "pool", "", "take a ready sandbox from the warm pool `NAME` (see forkbox pool)")
	f.BoolVar(&noAutoResume, "no-auto-resume", false, "do not resume the sandbox by itself when a call needs it while it is suspended")
	f.Float64Var(&cpus, "cpus", 0, "CPU limit, fractional (e.g. 0.5)")
	f.Int64Var(&memory, "memory", 0, "memory limit in MB")
	f.Int64Var(&disk, "disk", 0, "writable disk size in MB")
	f.Int64Var(&pids, "pids", 0, "maximum number of processes")
	f.Var(&timeout, "timeout", "idle timeout: seconds or a duration like 10m")
	f.Var(&lifetime, "max-lifetime", "terminate after this long regardless of activity (seconds or duration)")
	f.BoolVar(&req.AllowInternetAccess, "internet", false, "allow outbound network access")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `K=V` (repeatable)")
	f.StringArrayVarP(&labels, "label", "l", nil, "label `K=V` (repeatable)")
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
		labels []string
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Example: `  forkbox ls
  forkbox ls --state running --label team=data`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
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
			list, err := c.ListSandboxes(ctx, opts)
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), list)
			}
			printSandboxTable(cmd.OutOrStdout(), list.Sandboxes, time.Now())
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&opts.State, "state", "", "only sandboxes in this state (running, suspended, terminated, …)")
	f.StringVar(&opts.Name, "name", "", "only the sandbox with this name")
	f.StringArrayVarP(&labels, "label", "l", nil, "only sandboxes with label `K=V` (repeatable)")
	return cmd
}

func printSandboxTable(w io.Writer, sbs []api.Sandbox, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tIMAGE\tCPUS\tMEM\tAGE")
	for _, sb := range sbs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			sb.ID, orDash(sb.Name), sb.State, orDash(sb.Image),
			strconv.FormatFloat(sb.CPUs, 'f', -1, 64), humanMB(sb.MemoryMB), humanAge(now, sb.CreatedAt))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanMB formats a size in MB: 512M, 2G, 1.5G.
func humanMB(mb int64) string {
	switch {
	case mb <= 0:
		return "-"
	case mb < 1024:
		return fmt.Sprintf("%dM", mb)
	case mb%1024 == 0:
		return fmt.Sprintf("%dG", mb/1024)
	}
	return fmt.Sprintf("%.1fG", float64(mb)/1024)
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
						fmt.Fprintf(cmd.ErrOrStderr(), "forkbox: %s: %v\n", name, explain(err))
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
