// Command forkbox-agent is the in-sandbox half of forkbox: a sandbox's first
// process (__sandbox-init, started through __sandbox-spawn) and its agent
// (agent), in a binary that carries nothing else. The daemon's own
// dependencies (model SDKs, MCP, OCI, SQLite, metrics) are then neither
// mapped nor initialised when a sandbox starts, which keeps the agent's
// start to a third of the full binary's. forkbox serve uses it when it finds
// it next to its own executable (make build puts it there) and otherwise
// plays these roles itself.
package main

import (
	"fmt"
	"os"

	"github.com/forkbox/forkbox/internal/agent/server"
	"github.com/forkbox/forkbox/internal/sandboxinit"
)

func main() {
	role := ""
	if len(os.Args) > 1 {
		role = os.Args[1]
	}
	switch role {
	case "__sandbox-init":
		sandboxinit.Main()
	case sandboxinit.SpawnRole:
		sandboxinit.Spawn(os.Args[2:])
	case "agent":
		if os.Getpid() != 1 {
			fmt.Fprintln(os.Stderr, "forkbox-agent: the agent runs only as a sandbox's init (pid 1)")
			os.Exit(2)
		}
		if err := server.Main(); err != nil {
			fmt.Fprintln(os.Stderr, "forkbox-agent:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintln(os.Stderr, "forkbox-agent is started by forkbox inside sandboxes (roles: __sandbox-spawn, __sandbox-init, agent); run forkbox instead")
		os.Exit(2)
	}
}
