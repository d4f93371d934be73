package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/api"
	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/units"
)

func checkpointCmd() *cobra.Command {
	var (
		req    api.CheckpointRequest
		memory bool
	)
	cmd := &cobra.Command{
		Use:   "checkpoint SANDBOX",
		Short: "Save a sandbox as a snapshot and print the snapshot's id",
		Long: `Save a running sandbox as a snapshot and print the snapshot's id. The sandbox
is paused while it is saved and then keeps running.

A filesystem snapshot (the default) holds the sandbox's files: restoring it is
a cold boot. A memory snapshot (--memory) also holds every process and its
memory: restoring it is a warm start where the kernels keep their variables.
It takes longer and needs CRIU on the daemon's host.

Restore a snapshot with forkbox create --snapshot ID.`,
		Example: `  forkbox checkpoint analysis
  SNAP=$(forkbox checkpoint --memory --name after-load analysis)
  forkbox create --snapshot $SNAP --name analysis-2`,
		Args: exactArgs(1, "checkpoint: name the SANDBOX to checkpoint"),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			sandbox := args[0]
			req.Type = api.SnapshotFilesystem
			if memory {
				req.Type = api.SnapshotMemory
			}
			p := startProgress(cmd, fmt.Sprintf("Saving a %s snapshot of %s", req.Type, sandbox))
			defer p.Stop()
			sn, err := c.Checkpoint(ctx, sandbox, req)
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("%w (the daemon may still finish the checkpoint: see forkbox snapshots %s)", errInterrupted, sandbox)
				}
				return err
			}
			p.Done("Saved %s snapshot %s of %s (%s, paused %s)", sn.Type, sn.ID, sandbox, units.Bytes(sn.SizeBytes), humanMS(sn.PausedMS))
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), sn)
			}
			fmt.Fprintln(cmd.OutOrStdout(), sn.ID)
			return nil
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&memory, "memory", false, "save processes and memory too (a warm restore; needs CRIU on the daemon)")
	f.StringVar(&req.Name, "name", "", "a label for the snapshot (at most 128 characters; need not be unique)")
	return cmd
}

func forkCmd() *cobra.Command {
	var (
		count int
		names []string
	)
	cmd := &cobra.Command{
		Use:   "fork SANDBOX",
		Short: "Copy a running sandbox into new sandboxes and print their ids",
		Long: `Take a memory snapshot of a running sandbox and start new sandboxes from it,
one id per line. The copies start where the source is now, with the same files,
processes and kernel variables, and from then on diverge independently of it and
of each other.

Fork is all or nothing: if one copy fails to start, none is kept. It needs CRIU
on the daemon's host.`,
		Example: `  forkbox fork analysis
  forkbox fork analysis -n 3
  forkbox fork analysis --name try-a --name try-b
  for SB in $(forkbox fork analysis -n 4); do forkbox run $SB 'print(model.score())' & done; wait`,
		Args: exactArgs(1, "fork: name the SANDBOX to fork"),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			sandbox := args[0]
			req := api.ForkRequest{Count: count, Names: names}
			if !cmd.Flags().Changed("count") {
				req.Count = max(1, len(names))
			} else if len(names) > 0 && len(names) != count {
				return fmt.Errorf("fork: %d --name for -n %d; give one --name per copy, or none", len(names), count)
			}
			msg := fmt.Sprintf("Forking %s into %s", sandbox, plural(req.Count, "sandbox", "sandboxes"))
			p := startProgress(cmd, msg)
			defer p.Stop()
			res, err := c.Fork(ctx, sandbox, req)
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("%w (the daemon may still finish the fork: see forkbox ls and forkbox snapshots %s)", errInterrupted, sandbox)
				}
				return err
			}
			p.Done("Forked %s into %s from snapshot %s (paused %s)", sandbox, plural(len(res.Sandboxes), "sandbox", "sandboxes"),
				res.Snapshot.ID, humanMS(res.Snapshot.PausedMS))
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), res)
			}
			for _, sb := range res.Sandboxes {
				fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.IntVarP(&count, "count", "n", 0, "number of copies, 1–16 (default 1, or one per --name)")
	f.StringArrayVar(&names, "name", nil, "`NAME` of a copy, in order (repeatable; as many as -n)")
	return cmd
}

func snapshotsCmd() *cobra.Command {
	var flat bool
	cmd := &cobra.Command{
		Use:   "snapshots [SANDBOX]",
		Short: "Show snapshots as a tree of their lineage",
		Long:  snapshotsLong,
		Example: `  forkbox snapshots
  forkbox snapshots analysis
  forkbox snapshots --flat`,
		Args: maxArgs(1, "snapshots: at most one SANDBOX"),
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			return listSnapshots(ctx, c, cmd, args, flat)
		}),
	}
	cmd.Flags().BoolVar(&flat, "flat", false, "one snapshot a line, newest first, with its PARENT (for scripts)")
	return cmd
}

const snapshotsLong = `Show snapshots, all of them or those taken of SANDBOX, as a tree: a snapshot
of a sandbox that was restored (or forked) from snapshot X is drawn under X.
FROM is the sandbox the snapshot was taken of; RESTORED AS lists the
sandboxes that started from it and are not terminated. Sizes are in binary
units (KiB, MiB, GiB).

--flat prints one snapshot a line, newest first, with PARENT (the snapshot
its sandbox was itself restored from) and PAUSED (how long the sandbox was
paused to take it); --json prints the list as JSON.`

func listSnapshots(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string, flat bool) error {
	sandbox := ""
	if len(args) > 0 {
		sandbox = args[0]
	}
	list, err := c.ListSnapshots(ctx, sandbox)
	if err != nil {
		return err
	}
	if clientFlags.json {
		return printJSON(cmd.OutOrStdout(), list)
	}
	if flat {
		printSnapshotTable(cmd.OutOrStdout(), list.Snapshots, time.Now())
		return nil
	}
	// The sandboxes name the snapshots' sources and say which were
	// restored from each.
	sbs, err := c.ListSandboxes(ctx, client.ListOptions{IncludeTerminated: true})
	if err != nil {
		return fmt.Errorf("list sandboxes for the tree (--flat needs none): %w", err)
	}
	printSnapshotTree(cmd.OutOrStdout(), list.Snapshots, sbs.Sandboxes, time.Now())
	return nil
}

// printSnapshotTree draws sns by lineage: a snapshot's children are the
// snapshots whose ParentID is it (taken of sandboxes restored from it),
// oldest first; snapshots whose parent is not in sns are roots.
func printSnapshotTree(w io.Writer, sns []api.Snapshot, sbs []api.Sandbox, now time.Time) {
	if len(sns) == 0 {
		fmt.Fprintln(w, "no snapshots; forkbox checkpoint SANDBOX takes one")
		return
	}
	byID := make(map[string]api.Sandbox, len(sbs))
	restored := map[string][]string{} // snapshot id → sandboxes started from it
	for _, sb := range sbs {
		byID[sb.ID] = sb
	}
	// Oldest first, as the tree.
	live := append([]api.Sandbox{}, sbs...)
	sort.SliceStable(live, func(i, j int) bool {
		if !live[i].CreatedAt.Equal(live[j].CreatedAt) {
			return live[i].CreatedAt.Before(live[j].CreatedAt)
		}
		return live[i].ID < live[j].ID
	})
	for _, sb := range live {
		if sb.SnapshotID != "" && sb.State != api.StateTerminated {
			restored[sb.SnapshotID] = append(restored[sb.SnapshotID], sandboxLabel(sb))
		}
	}
	sorted := append([]api.Snapshot{}, sns...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if !sorted[i].CreatedAt.Equal(sorted[j].CreatedAt) {
			return sorted[i].CreatedAt.Before(sorted[j].CreatedAt)
		}
		return sorted[i].ID < sorted[j].ID
	})
	in := make(map[string]bool, len(sorted))
	for _, sn := range sorted {
		in[sn.ID] = true
	}
	children := map[string][]api.Snapshot{}
	var roots []api.Snapshot
	for _, sn := range sorted {
		if sn.ParentID != "" && in[sn.ParentID] && sn.ParentID != sn.ID {
			children[sn.ParentID] = append(children[sn.ParentID], sn)
		} else {
			roots = append(roots, sn)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "SNAPSHOT\tNAME\tTYPE\tSIZE\tAGE\tFROM\tRESTORED AS")
	seen := map[string]bool{}
	var draw func(sn api.Snapshot, lead, branch string)
	draw = func(sn api.Snapshot, lead, branch string) {
		if seen[sn.ID] {
			return
		}
		seen[sn.ID] = true
		from := sn.SandboxID
		if sb, ok := byID[sn.SandboxID]; ok {
			from = sandboxLabel(sb)
		}
		fmt.Fprintf(tw, "%s%s%s\t%s\t%s\t%s\t%s\t%s\t%s\n", lead, branch, sn.ID, orDash(sn.Name), sn.Type,
			units.Bytes(sn.SizeBytes), humanAge(now, sn.CreatedAt), orDash(from), listOrDash(restored[sn.ID], 3))
		next := lead
		switch branch {
		case "├─ ":
			next += "│  "
		case "└─ ":
			next += "   "
		}
		kids := children[sn.ID]
		for i, kid := range kids {
			b := "├─ "
			if i == len(kids)-1 {
				b = "└─ "
			}
			draw(kid, next, b)
		}
	}
	for _, root := range roots {
		draw(root, "", "")
	}
	tw.Flush()
}

// sandboxLabel names a sandbox by its name, or its id when it has none.
func sandboxLabel(sb api.Sandbox) string {
	if sb.Name != "" {
		return sb.Name
	}
	return sb.ID
}

// listOrDash joins up to n items ("a, b, c +2 more"), or "-" for none.
func listOrDash(items []string, n int) string {
	switch {
	case len(items) == 0:
		return "-"
	case len(items) > n:
		return fmt.Sprintf("%s +%d more", strings.Join(items[:n], ", "), len(items)-n)
	}
	return strings.Join(items, ", ")
}

func printSnapshotTable(w io.Writer, sns []api.Snapshot, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tNAME\tSANDBOX\tPARENT\tSIZE\tPAUSED\tAGE")
	for _, sn := range sns {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			sn.ID, sn.Type, orDash(sn.Name), orDash(sn.SandboxID), orDash(sn.ParentID),
			units.Bytes(sn.SizeBytes), humanMS(sn.PausedMS), humanAge(now, sn.CreatedAt))
	}
	tw.Flush()
}

func snapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "List, inspect and remove snapshots",
		Long: `Snapshots are saved states of sandboxes: take one with forkbox checkpoint (or
forkbox fork), restore one with forkbox create --snapshot ID.`,
		Example: `  forkbox snapshot ls analysis
  forkbox snapshot inspect snap_0123456789ab
  forkbox snapshot rm snap_0123456789ab`,
		Args: cobra.NoArgs, // an unknown subcommand is an error, not help
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		snapshotLsCmd(),
		&cobra.Command{
			Use:     "inspect ID",
			Aliases: []string{"get"},
			Short:   "Show one snapshot",
			Args:    exactArgs(1, "snapshot inspect: name the snapshot ID"),
			RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
				sn, err := c.GetSnapshot(ctx, args[0])
				if err != nil {
					return err
				}
				if clientFlags.json {
					return printJSON(cmd.OutOrStdout(), sn)
				}
				printSnapshotTable(cmd.OutOrStdout(), []api.Snapshot{*sn}, time.Now())
				return nil
			}),
		},
		snapshotRmCmd())
	return cmd
}

func snapshotLsCmd() *cobra.Command {
	cmd := snapshotsCmd()
	cmd.Use = "ls [SANDBOX]"
	cmd.Aliases = []string{"list"}
	cmd.Short = "Show snapshots as a tree of their lineage (same as forkbox snapshots)"
	cmd.Example = `  forkbox snapshot ls
  forkbox snapshot ls analysis --flat`
	cmd.Args = maxArgs(1, "snapshot ls: at most one SANDBOX")
	return cmd
}

func snapshotRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"delete"},
		Short:   "Delete snapshots and free their space",
		Long: `Delete snapshots and free their space, printing the id of each one deleted
(--json: a JSON array of them). Sandboxes restored from a snapshot keep
running: they do not need it.`,
		Example: `  forkbox snapshot rm snap_0123456789ab snap_ba9876543210`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("snapshot rm: name at least one snapshot ID")
			}
			return nil
		},
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, ids []string) error {
			return removeEach(ctx, cmd, ids, "snapshots", func(id string) error { return c.DeleteSnapshot(ctx, id) })
		}),
	}
}

// maxArgs is cobra.MaximumNArgs with a message that says what is wrong.
func maxArgs(n int, msg string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) > n {
			return errors.New(msg)
		}
		return nil
	}
}

// humanMS formats milliseconds: 420ms, 1.3s, 2m05s; "-" for none.
func humanMS(ms int64) string {
	switch {
	case ms <= 0:
		return "-"
	case ms < 1000:
		return fmt.Sprintf("%dms", ms)
	}
	return elapsed(time.Duration(ms) * time.Millisecond)
}

// plural formats n with the singular or plural noun: 1 sandbox, 3 sandboxes.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// removeEach deletes each named item, printing what was removed (or, with
// --json, a list of it); it carries on past failures and reports how many
// failed. what is the plural noun for the message ("snapshots").
func removeEach(ctx context.Context, cmd *cobra.Command, items []string, what string, del func(string) error) error {
	var (
		done   = []string{}
		failed int
		last   error
	)
	for _, item := range items {
		if err := del(item); err != nil {
			if ctx.Err() != nil {
				return err
			}
			failed++
			last = err
			if len(items) > 1 {
				fmt.Fprintf(cmd.ErrOrStderr(), "forkbox: %s\n", itemError(item, err))
			}
			continue
		}
		done = append(done, item)
		if !clientFlags.json {
			fmt.Fprintln(cmd.OutOrStdout(), item)
		}
	}
	if clientFlags.json {
		if err := printJSON(cmd.OutOrStdout(), done); err != nil {
			return err
		}
	}
	switch {
	case failed == 0:
		return nil
	case len(items) == 1:
		return last
	}
	return fmt.Errorf("%d of %d %s not removed", failed, len(items), what)
}
