package main

import (
	"flag"
	"os/exec"
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

// The agent binary runs in every sandbox: what it links is what each
// sandbox's init and agent initialise at start, and what a subverted agent
// could reach. It must link no daemon-side package and neither of the
// libraries the seccomp filter is built from (it carries the filter
// assembled: internal/harden, tag forkbox_agent).
func TestAgentLinksNoDaemonCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "forkbox_agent", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/forkbox/forkbox/internal/runtime",
		"github.com/forkbox/forkbox/internal/netsetup",
		"github.com/forkbox/forkbox/internal/image",
		"github.com/forkbox/forkbox/internal/sandbox",
		"github.com/forkbox/forkbox/internal/store",
		"github.com/forkbox/forkbox/internal/httpapi",
		"github.com/forkbox/forkbox/internal/daemon",
		"github.com/moby/profiles/seccomp",
		"github.com/elastic/go-seccomp-bpf",
		"github.com/opencontainers/cgroups",
		"github.com/cilium/ebpf",
		"github.com/google/nftables",
		"github.com/google/go-containerregistry",
		"modernc.org/sqlite",
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("forkbox-agent links %s", d)
			}
		}
	}
}
