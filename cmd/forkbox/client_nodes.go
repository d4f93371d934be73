package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/client"
	"github.com/forkbox/forkbox/internal/units"
)

func nodesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "List the nodes of the daemon's cluster",
		Long: `List the daemons that share the daemon's PostgreSQL store (serve --store) as
nodes of one cluster: each one's id, whether its heartbeat is recent (up) or
not (down), its address, its running sandboxes, and its memory (reserved by
sandboxes / in all). The node that answered is marked with *. Any node
serves any sandbox; a single daemon lists none.`,
		Args: cobra.NoArgs,
		RunE: run(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			list, err := c.Nodes(ctx)
			if err != nil {
				return err
			}
			if clientFlags.json {
				return printJSON(cmd.OutOrStdout(), list)
			}
			if len(list.Nodes) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "a single daemon: no cluster (serve --store postgres://… makes daemons nodes of one)")
				return nil
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tSTATE\tADDRESS\tRUNNING\tMEMORY\tHEARTBEAT")
			for _, n := range list.Nodes {
				id := n.ID
				if n.Self {
					id += " *"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s / %s\t%s ago\n", id, n.State, n.Address, strconv.Itoa(n.Running),
					units.Bytes(n.MemoryReservedBytes), units.Bytes(n.MemoryBytes), time.Since(n.HeartbeatAt).Round(time.Second))
			}
			return w.Flush()
		}),
	}
}
