package main

import (
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/forkbox/forkbox/internal/tools/deps"
)

var updateDeps = flag.Bool("update", false, "rewrite deps.txt from what forkbox-agent links")

// deps.txt lists every package outside the standard library that the agent
// links (built as make build builds it, with the tag forkbox_agent), so that
// anything new in what every sandbox runs is a reviewed diff of it.
func TestDeps(t *testing.T) {
	deps.Check(t, "deps.txt", *updateDeps, "forkbox_agent")
}

// inSandbox are the packages of this module that the agent binary may link,
// by their path in the module: the code that runs inside a sandbox, and
// what it shares with the daemon (the API's and the agent's wire types, the
// error kinds). Every other package of the module is daemon-side. A package
// is added here only if it is sandbox-side code, never to let a daemon-side
// one through.
var inSandbox = []string{
	"api",
	"internal/agent/server",
	"internal/agent/wire",
	"internal/errdefs",
	"internal/harden",
	"internal/kernel",
	"internal/lazyre",
	"internal/sandboxinit",
	"internal/textcut",
}

// daemonSide are packages the agent must never link, whatever inSandbox
// says: the module's daemon-side packages (by their path in the module,
// their subpackages with them) and the libraries only the daemon needs,
// among them the two the seccomp filter is built from (the agent carries it
// assembled: internal/harden, tag forkbox_agent).
var daemonSide = []string{
	"internal/agent/client",
	"internal/runtime",
	"internal/netsetup",
	"internal/image",
	"internal/build",
	"internal/snapshot",
	"internal/criu",
	"internal/sandbox",
	"internal/store",
	"internal/httpapi",
	"internal/daemon",
	"github.com/moby/profiles/seccomp",
	"github.com/elastic/go-seccomp-bpf",
	"github.com/opencontainers/cgroups",
	"github.com/cilium/ebpf",
	"github.com/google/nftables",
	"github.com/vishvananda/netlink",
	"github.com/google/go-containerregistry",
	"modernc.org/sqlite",
}

// The agent binary runs in every sandbox: what it links is what each
// sandbox's init and agent initialise at start, and what a subverted agent
// could reach. It links no daemon-side package: of this module only the
// packages inSandbox lists (all of them, so that the list stays what the
// agent is), and none of daemonSide. A failure names the package and the
// chain of imports that pulls it in.
func TestAgentLinksNoDaemonCode(t *testing.T) {
	pkgs, err := deps.Packages(t.Context(), ".", "forkbox_agent")
	if err != nil {
		t.Fatal(err)
	}
	self := pkgs[len(pkgs)-1]
	module := self.Module.Path
	why := func(pkg string) string {
		chain := deps.ImportChain(pkgs, self.ImportPath, pkg)
		for i, p := range chain {
			chain[i] = strings.TrimPrefix(p, module+"/")
		}
		return strings.Join(chain, " → ")
	}
	linked := map[string]bool{}
	for _, p := range pkgs[:len(pkgs)-1] {
		if p.Standard {
			continue
		}
		ours := p.Module != nil && p.Module.Main
		rel := p.ImportPath
		if ours {
			rel = strings.TrimPrefix(rel, module+"/")
			linked[rel] = true
		}
		switch {
		case slices.ContainsFunc(daemonSide, func(d string) bool { return rel == d || strings.HasPrefix(rel, d+"/") }):
			t.Errorf("forkbox-agent links the daemon-side package %s: %s", rel, why(p.ImportPath))
		case ours && !slices.Contains(inSandbox, rel):
			t.Errorf("forkbox-agent links %s, which is not one of its in-sandbox packages (inSandbox): %s", rel, why(p.ImportPath))
		}
	}
	for _, p := range inSandbox {
		if !linked[p] {
			t.Errorf("inSandbox lists %s, which forkbox-agent no longer links: drop it from the list", p)
		}
	}
}
