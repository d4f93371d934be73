package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/forkbox/forkbox/internal/mcpserver"
)

// mcpCmd serves forkbox's MCP tools over stdio for an MCP client (Claude
// Desktop, an IDE, an agent framework) that starts `forkbox mcp` as a
// subprocess; the tools talk to the daemon at --url like the other client
// commands.
func mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve forkbox's MCP tools over stdio (for MCP clients)",
		Long: "Serve the Model Context Protocol on stdin/stdout: tools to create, list and terminate sandboxes,\n" +
			"run code and commands, read and write files, checkpoint, fork, suspend, resume and list snapshots.\n" +
			"The tools call the daemon at --url (env " + "FORKBOX_URL" + ") with --api-key (env FORKBOX_API_KEY).\n" +
			"A daemon also serves the same tools over streamable HTTP at /mcp.\n\n" +
			"Example MCP client configuration:\n" +
			`  {"mcpServers": {"forkbox": {"command": "forkbox", "args": ["mcp"],` + "\n" +
			`                              "env": {"FORKBOX_URL": "http://127.0.0.1:8080"}}}}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c := newClient()
			fmt.Fprintf(os.Stderr, "forkbox mcp: serving MCP on stdio, daemon %s\n", c.BaseURL())
			err := mcpserver.ServeStdio(ctx, c, nil)
			// The client closing stdin, or a signal, is the normal end.
			if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
}
