package main

import (
	"context"
	"errors"
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

// lifecycleVerb describes suspend or resume for lifecycleCmd.
type lifecycleVerb struct {
	name, doing, done string // "suspend", "Suspending", "Suspended"
	call              func(*client.Client, context.Context, string) (*api.Sandbox, error)
}

func suspendCmd() *cobra.Command {
	cmd := lifecycleCmd(lifecycleVerb{"suspend", "Suspending", "Suspended", (*client.Client).Suspend})
	cmd.Short = "Save sandboxes to disk and free their CPU and memory"
	cmd.Long = `Suspend running sandboxes: save each one's files, processes and memory to
disk and free its CPU and RAM, so it costs nothing while it waits. It keeps its
id and name; forkbox resume brings it back, kernels and variables included, and
so does the next call that needs it unless it was created with
--no-auto-resume. Prints "ID STATE" for each sandbox.

A named sandbox is also suspended by itself when it has been idle for its
timeout. Suspending needs CRIU on the daemon's host.`
	cmd.Example = `  forkbox suspend analysis
  forkbox suspend sbx_0123456789ab analysis-2`
	return cmd
}

func resumeCmd() *cobra.Command {
	cmd := lifecycleCmd(lifecycleVerb{"resume", "Resuming", "Resumed", (*client.Client).Resume})
	cmd.Short = "Bring suspended sandboxes back"
	cmd.Long = `Resume suspended sandboxes under the same id and name, with their files,
processes and kernel variables as they were. Prints "ID STATE" for each
sandbox.`
	cmd.Example = `  forkbox resume analysis`
	return cmd
}

// lifecycleCmd is forkbox suspend or forkbox resume: v applied to each
// SANDBOX in turn.
func lifecycleCmd(v lifecycleVerb) *cobra.Command {
	return &cobra.Command{
		Use: v.name + " SANDBOX...",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%s: name at least one SANDBOX (id or name)", v.name)
			}
			return nil
		},
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			var (
				done   = []api.Sandbox{}
				failed int
				last   error
			)
			for _, name := range args {
				p := startProgress(cmd, v.doing+" "+name)
				sb, err := v.call(c, ctx, name)
				if err != nil {
					p.Stop()
					if ctx.Err() != nil {
						return fmt.Errorf("%w (the daemon may still finish %s %s: see forkbox ls)", errInterrupted, strings.ToLower(v.doing), name)
					}
					failed++
					last = err
					if len(args) > 1 {
						fmt.Fprintf(cmd.ErrOrStderr(), "forkbox: %s\n", itemError(name, err))
					}
					continue
				}
				if sb.ID == name || sb.Name == "" {
					p.Done("%s %s", v.done, sb.ID)
				} else {
					p.Done("%s %s (%s)", v.done, sb.Name, sb.ID)
				}
				done = append(done, *sb)
				if !clientFlags.json {
					fmt.Fprintln(cmd.OutOrStdout(), sb.ID, sb.State)
				}
			}
			if clientFlags.json {
				if err := printJSON(cmd.OutOrStdout(), api.SandboxList{Sandboxes: done}); err != nil {
					return err
				}
			}
			switch {
			case failed == 0:
				return nil
			case len(args) == 1:
				return last
			}
			return fmt.Errorf("%d of %d sandboxes not %s", failed, len(args), strings.ToLower(v.done))
		}),
	}
}

func poolCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Create, list and remove warm pools of ready sandboxes",
		Long: `A warm pool keeps a number of sandboxes ready, restored from a "golden"
snapshot (or started from an image), so that forkbox create --pool NAME hands
one out at once instead of booting or restoring it. The pool refills itself.`,
		Example: `  SNAP=$(forkbox checkpoint --memory analysis)
  forkbox pool create warm --snapshot $SNAP --size 4
  forkbox create --pool warm --name session-42
  forkbox pool ls
  forkbox pool rm warm`,
		Args: cobra.NoArgs, // an unknown subcommand is an error, not help
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(poolCreateCmd(), poolLsCmd(), poolRmCmd())
	return cmd
}

func poolCreateCmd() *cobra.Command {
	var req api.CreatePoolRequest
	cmd := &cobra.Command{
		Use:   "create NAME (--snapshot ID | --image IMAGE) --size N",
		Short: "Create a warm pool and print its name",
		Long: `Create a warm pool of --size (1–32) ready sandboxes, restored from the
snapshot --snapshot (a memory snapshot is a warm start: kernels and variables
included) or started from the image --image. Sandboxes taken from the pool with
forkbox create --pool NAME are replaced in the background.`,
		Example: `  forkbox pool create warm --snapshot snap_0123456789ab --size 4
  forkbox pool create plain --image python --size 2`,
		Args: exactArgs(1, "pool create: name the pool: forkbox pool create NAME (--snapshot ID | --image IMAGE) --size N"),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			switch {
			case req.SnapshotID != "" && req.Image != "":
				return errors.New("pool create: give --snapshot or --image, not both")
			case req.SnapshotID == "" && req.Image == "":
				return errors.New("pool create: give the --snapshot ID or the --image to fill the pool from")
			case !cmd.Flags().Changed("size"):
				return errors.New("pool create: give the pool's --size (1–32)")
			}
			p := startProgress(cmd, "Creating pool "+req.Name)
			pool, err := c.CreatePool(ctx, req)
			p.Stop()
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), pool)
			}
			fmt.Fprintln(cmd.OutOrStdout(), pool.Name)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.SnapshotID, "snapshot", "", "snapshot `ID` to restore the pool's sandboxes from")
	f.StringVar(&req.Image, "image", "", "`IMAGE` to start the pool's sandboxes from")
	f.IntVarP(&req.Size, "size", "n", 0, "keep `N` sandboxes ready (1–32)")
	return cmd
}

func poolLsCmd() *cobra.Command {
	var members bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List warm pools",
		Long: `List warm pools. SOURCE is the snapshot the pool restores, or the image it
starts; READY is how many of its SIZE sandboxes are ready now.

With --members, also the sandboxes each pool keeps ready (on the node that
answers), one line each: forkbox rm ID removes one. An admin key also sees
the daemon's default pool (_default), whose members no other listing shows.`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			list, err := c.ListPools(ctx)
			if members {
				list, err = c.ListPoolsWithMembers(ctx)
			}
			if err != nil {
				return err
			}
			if clientFlags.json {
				if list.Pools == nil {
					list.Pools = []api.Pool{}
				}
				return printJSON(cmd.OutOrStdout(), list)
			}
			if members {
				printPoolMembers(cmd.OutOrStdout(), list.Pools, time.Now())
				return nil
			}
			printPoolTable(cmd.OutOrStdout(), list.Pools, time.Now())
			return nil
		}),
	}
	cmd.Flags().BoolVar(&members, "members", false, "list the sandboxes each pool keeps ready")
	return cmd
}

// printPoolMembers prints one line per ready sandbox of each pool (a pool
// with none gets a line of dashes, so every pool shows).
func printPoolMembers(w io.Writer, pools []api.Pool, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "POOL	SANDBOX	STATE	AGE")
	for _, p := range pools {
		if len(p.Members) == 0 {
			fmt.Fprintf(tw, "%s	-	-	-\n", p.Name)
		}
		for _, sb := range p.Members {
			fmt.Fprintf(tw, "%s	%s	%s	%s\n", p.Name, sb.ID, sb.State, humanAge(now, sb.CreatedAt))
		}
	}
	tw.Flush()
}

func printPoolTable(w io.Writer, pools []api.Pool, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tSIZE\tREADY\tAGE")
	for _, p := range pools {
		source := p.SnapshotID
		if source == "" {
			source = orDash(p.Image)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, source, strconv.Itoa(p.Size), strconv.Itoa(p.Ready), humanAge(now, p.CreatedAt))
	}
	tw.Flush()
}

func poolRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"delete"},
		Short:   "Remove warm pools and terminate their ready sandboxes",
		Long: `Remove warm pools, printing the name of each one removed (--json: a JSON
array of them). The pools' ready sandboxes are terminated; sandboxes already
handed out keep running.`,
		Example: `  forkbox pool rm warm`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("pool rm: name at least one pool NAME")
			}
			return nil
		},
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, names []string) error {
			return removeEach(ctx, cmd, names, "pools", func(name string) error { return c.DeletePool(ctx, name) })
		}),
	}
}
