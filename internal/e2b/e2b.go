// Package e2b serves E2B's API, so that programs written for E2B's SDKs
// (npm e2b and @e2b/code-interpreter, Python e2b and e2b-code-interpreter)
// run unchanged against forkbox, configured by three environment variables:
//
//	E2B_API_URL=http://<forkbox>  E2B_SANDBOX_URL=http://<forkbox>  E2B_API_KEY=<a forkbox key>
//
// It has two planes. The control plane (sandboxes: create, connect, pause,
// kill, info, list, timeout) is REST at the root (/sandboxes, /v2/sandboxes),
// authenticated by X-API-Key with forkbox's own keys and tenants. The data
// plane is what E2B runs inside each sandbox — envd (port 49983: processes
// and the filesystem over the Connect protocol, /files, /health) and the
// code interpreter (port 49999: /execute, /contexts) — served by the daemon
// on the sandbox's behalf: every request names its sandbox in the
// E2b-Sandbox-Id header and the port in E2b-Sandbox-Port, and carries the
// sandbox's access token, which the create or connect answer gave.
//
// A sandbox made here is an ordinary forkbox sandbox of the key's tenant,
// visible through forkbox's own API, and the other way round.
package e2b

import (
	"context"
	"net/http"
)

// E2B's well-known ports inside a sandbox.
const (
	EnvdPort    = "49983"
	JupyterPort = "49999"
)

// Header names of the data plane.
const (
	hdrSandboxID    = "E2b-Sandbox-Id"
	hdrSandboxPort  = "E2b-Sandbox-Port"
	hdrAccessToken  = "X-Access-Token"
	hdrTrafficToken = "E2B-Traffic-Access-Token"
)

// IsDataPlane reports whether r is for a sandbox's envd or code
// interpreter (it names its sandbox in a header).
func IsDataPlane(r *http.Request) bool { return r.Header.Get(hdrSandboxID) != "" }

// DataPlaneSandbox is the sandbox a data-plane request names (not yet
// authorized: its token is checked where it is served).
func DataPlaneSandbox(r *http.Request) string { return r.Header.Get(hdrSandboxID) }

type sandboxKey struct{}

// withSandbox returns ctx carrying the forkbox id of the sandbox a
// data-plane request is for (resolved and authorized).
func withSandbox(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, sandboxKey{}, id)
}

// sandboxID is the forkbox id of the sandbox a data-plane request is for.
func sandboxID(ctx context.Context) string {
	id, _ := ctx.Value(sandboxKey{}).(string)
	return id
}

// homeDir is where E2B clients' relative paths, commands and code contexts
// start: the default user's home.
const homeDir = "/home/user"
