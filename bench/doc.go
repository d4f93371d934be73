// Package bench holds forkbox's performance benchmarks: sandbox create to
// first exec, exec round trip and idle memory per sandbox, each next to
// baselines (unshare, runc) measured in the same run.
//
// They start a real daemon, so they need Linux and root:
//
//	make bench
//	# or: go test -run '^$' -bench . -benchtime 1x -timeout 30m ./bench/...
//
// Each benchmark takes a fixed number of samples per invocation (50 creates,
// 200 execs, 50 idle sandboxes) regardless of b.N, so run them with
// -benchtime 1x. Results are reported as custom metrics (p50-ms, p95-ms, ...)
// and also printed as markdown table rows, ready for docs/benchmarks.md.
//
// Environment:
//
//	FORKBOX_BIN          the forkbox binary to run (else it is built, CGO_ENABLED=0)
//	FORKBOX_BENCH_KEEP=1 keep the temporary data dirs and daemon logs
package bench
