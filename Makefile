# forkbox build, setup and CI entry points. `make test` is what CI runs
# (.ci/run); `make run` starts a daemon with defaults.

# Go lives in /usr/local/go/bin on our hosts, which CI's PATH may lack.
export PATH := /usr/local/go/bin:$(PATH)

# e2e tests run this binary instead of building their own.
export FORKBOX_BIN := $(CURDIR)/bin/forkbox

SHELL  := /bin/bash
GO     ?= go
BIN    := bin/forkbox
ARGS   ?=

# Run privileged steps directly as root, else through sudo when present.
SUDO := $(shell if [ "$$(id -u)" -ne 0 ]; then command -v sudo; fi)

.PHONY: all build install setup image run test bench soak chaos fmt fmt-check vet lint clean

all: build

# Static binaries: bin/forkbox, and bin/forkbox-agent beside it, the init and
# agent of sandboxes without the daemon's dependencies (bind-mounted into
# sandboxes whose root may lack glibc; forkbox uses it when it is beside it).
# A phony target so Go's own cache decides what to rebuild.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/forkbox
	CGO_ENABLED=0 $(GO) build -trimpath -tags forkbox_agent -o $(BIN)-agent ./cmd/forkbox-agent

# Puts forkbox on PATH (PREFIX/bin, /usr/local/bin by default): the CLI the
# README calls bare, and its agent beside it.
PREFIX ?= /usr/local
install: build
	$(SUDO) install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/forkbox
	$(SUDO) install -D -m 0755 $(BIN)-agent $(DESTDIR)$(PREFIX)/bin/forkbox-agent

setup:
	@if [ "$$(id -u)" -ne 0 ]; then \
		if [ -n "$(SUDO)" ]; then \
			echo "make setup: not root; using sudo"; \
		else \
			echo "make setup: must run as root (no sudo found)" >&2; exit 1; \
		fi; \
	fi
	$(SUDO) ./scripts/setup.sh

# The default "python" image (images/python.yaml): built once (a few minutes:
# debootstrap plus apt), then served from the layer cache in under a second.
# prepare takes serve's flags (ARGS), so images go where that daemon looks.
image: build
	$(SUDO) ./$(BIN) prepare $(ARGS)

run: setup build install image
	exec ./$(BIN) serve $(ARGS)

# The output also goes to bin/test.log; on a failure, scripts/test-digest.sh
# repeats each failing test's messages at the end, where CI's cut shows them.
test: setup build image fmt-check vet lint
	@set -o pipefail; $(GO) test -race -count=1 -timeout 25m ./... 2>&1 | tee bin/test.log || \
		{ rc=$$?; ./scripts/test-digest.sh bin/test.log; exit $$rc; }

bench: setup build image
	@if [ "$$(id -u)" -ne 0 ]; then echo "make bench: benchmarks need root" >&2; exit 1; fi
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 120m ./bench/...

# The soak (test/soak): mixed concurrent traffic against one daemon for
# SOAK_DURATION, failing on any error or leak; make test runs a 2-minute one.
# A longer SOAK_DURATION needs a SOAK_TIMEOUT of at least 10 minutes more.
SOAK_DURATION ?= 20m
SOAK_TIMEOUT  ?= 45m
soak: setup build image
	@if [ "$$(id -u)" -ne 0 ]; then echo "make soak: the soak needs root" >&2; exit 1; fi
	FORKBOX_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -v -run '^TestSoak$$' -timeout $(SOAK_TIMEOUT) ./test/soak/

# The chaos soak (test/soak, TestChaos): CHAOS_WORKERS clients of the soak's
# kind while the daemon is SIGKILLed CHAOS_KILLS times (some just after a
# suspend, checkpoint, fork or resume started) and restarted, failing on a
# lost session or value, a 5xx but 503 with Retry-After, a restart slower
# than 5 s to /healthz, a sandbox left transient, or a leak; make test runs
# a 100-second one with 3 kills. The kills spread over CHAOS_DURATION, or
# come a mean CHAOS_INTERVAL of traffic apart; CHAOS_SEED repeats a run's
# choices; the daemon's whole log of a failed run goes to bin/chaos-daemon.log.
CHAOS_DURATION ?= 20m
CHAOS_KILLS    ?= 30
CHAOS_WORKERS  ?= 6
CHAOS_INTERVAL ?=
CHAOS_SEED     ?=
CHAOS_TIMEOUT  ?= 60m
chaos: setup build image
	@if [ "$$(id -u)" -ne 0 ]; then echo "make chaos: the chaos soak needs root" >&2; exit 1; fi
	FORKBOX_CHAOS_DURATION=$(CHAOS_DURATION) FORKBOX_CHAOS_KILLS=$(CHAOS_KILLS) FORKBOX_CHAOS_WORKERS=$(CHAOS_WORKERS) \
	FORKBOX_CHAOS_INTERVAL=$(CHAOS_INTERVAL) FORKBOX_CHAOS_SEED=$(CHAOS_SEED) FORKBOX_CHAOS_LOG=$(CURDIR)/bin/chaos-daemon.log \
		$(GO) test -count=1 -v -run '^TestChaos$$' -timeout $(CHAOS_TIMEOUT) ./test/soak/

# Fuzzing: every Fuzz target of the repository (found with go test -list in
# the packages whose tests declare one, so new targets are picked up), one
# after another, for FUZZTIME each; FUZZMINIMIZETIME bounds the shrinking of
# each new input (the default, 60s, would eat the slow targets' time). Their
# seed corpora (testdata/fuzz/) already run in make test as plain tests. A
# failure leaves its input in the package's testdata/fuzz/ and fails the run
# at the end, after the other targets ran.
FUZZTIME         ?= 20s
FUZZMINIMIZETIME ?= 5s
.PHONY: fuzz
fuzz:
	@pkgs=$$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -r -n1 dirname | sort -u); \
	list=$$($(GO) test -list '^Fuzz' $$pkgs) || { echo "$$list" >&2; exit 1; }; \
	failed=; \
	for t in $$(echo "$$list" | awk '/^Fuzz/ { n[++c] = $$1; next } /^ok/ { for (i = 1; i <= c; i++) print $$2 "@" n[i]; c = 0 }'); do \
		pkg=$${t%@*}; name=$${t#*@}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg </dev/null || failed="$$failed $$name"; \
	done; \
	if [ -n "$$failed" ]; then echo "make fuzz: failed:$$failed" >&2; exit 1; fi

fmt:
	gofmt -w -s .

# Fails listing the files that gofmt would change.
fmt-check:
	@out=$$(gofmt -l .); \
	if [ -n "$$out" ]; then \
		echo "gofmt: these files need formatting (run make fmt):" >&2; \
		echo "$$out" >&2; exit 1; \
	fi

vet:
	$(GO) vet ./...

# staticcheck (pinned in go.mod, run with go tool) for the daemon's and the
# agent's builds, and the import grouping check; see scripts/lint.sh.
lint:
	GO=$(GO) ./scripts/lint.sh

clean:
	rm -rf bin
	$(GO) clean -testcache
