#!/usr/bin/env bash
# lint.sh: the static checks that make test (make lint) runs besides gofmt
# and go vet. It reports every finding of both checks, then fails if either
# found something.
#
#  - staticcheck, with its default checks. go.mod's tool directive pins it
#    (honnef.co/go/tools), so `go tool` builds it from the module cache and
#    nothing is installed. It runs twice: over the whole module as the daemon
#    is built, and over the module's packages that the agent links as the
#    agent is built (tag forkbox_agent, under which internal/harden carries
#    its seccomp filter assembled); the runs are merged, so that code only one
#    of the two builds uses is not reported unused.
#  - importgroups (internal/tools/importgroups): the standard library's
#    imports first, a blank line, then the rest.
#  - go mod tidy -diff: go.mod and go.sum say exactly what the code uses
#    (a dependency used directly is not marked indirect).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

status=0
agent_pkgs=$("$GO" list -tags forkbox_agent -deps \
	-f '{{with .Module}}{{if .Main}}{{$.ImportPath}}{{end}}{{end}}' ./cmd/forkbox-agent)
# shellcheck disable=SC2086 # one argument per package
if "$GO" tool staticcheck -f binary ./... >"$tmp/daemon" &&
	"$GO" tool staticcheck -f binary -tags forkbox_agent $agent_pkgs >"$tmp/agent"; then
	"$GO" tool staticcheck -merge "$tmp/daemon" "$tmp/agent" || status=1
else
	status=1
fi
"$GO" run ./internal/tools/importgroups . || status=1
"$GO" mod tidy -diff || status=1
exit $status
