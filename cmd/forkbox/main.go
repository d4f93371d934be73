// Command forkbox is the one forkbox binary: the daemon (serve), the in-sandbox
// agent (agent, started by the runtime as a sandbox's init) and the client
// commands (create, ls, exec, run, contexts, cp, rm, …) that talk to a daemon
// over HTTP.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "forkbox",
		Short:         "Stateful code-interpreter sandboxes for LLM agents",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	addClientFlags(root)
	root.AddCommand(serveCmd(), prepareCmd())
	root.AddCommand(internalCmds()...)
	root.AddCommand(clientCmds()...)
	root.AddCommand(mcpCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "forkbox:", err)
		os.Exit(exitCode(err))
	}
}
