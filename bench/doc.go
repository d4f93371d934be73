// Package bench holds forkbox's performance benchmarks: sandbox create to
// first exec, exec round trip and idle memory per sandbox, each next to
// baselines (unshare, runc) measured in the same run; and, for code contexts,
// the round trip of a `1+1` cell next to jupyter_client driving a local
// ipykernel, and a group-by on a loaded DataFrame next to a fresh python3 per
// call (both baselines use /usr/bin/python3 with Debian's
// python3-jupyter-client, python3-ipykernel and python3-pandas); and a
// notebook's `1+1` cell through Debian's Jupyter Server with forkbox as its
// kernel gateway, next to the same server running a local ipykernel; and a
// page of GET /v1/sandboxes with 2,000 sandbox records in the store.
//
// They start a real daemon, so they need Linux and root:
//
//	make bench
//	# or: go test -run '^$' -bench . -benchtime 1x -timeout 30m ./bench/...
//
// Each benchmark takes a fixed number of samples per invocation (50 creates,
// 200 execs, 50 idle sandboxes, 1,000 cells, 50 group-bys) regardless of
// b.N, so run them with -benchtime 1x. Results are reported as custom
// metrics (p50-ms, p95-ms, ...) and also printed as markdown table rows,
// ready for docs/benchmarks.md.
//
// Environment:
//
//	FORKBOX_BIN          the forkbox binary to run (else it is built, CGO_ENABLED=0)
//	FORKBOX_BENCH_KEEP=1 keep the temporary data dirs and daemon logs
package bench
