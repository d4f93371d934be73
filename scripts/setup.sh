#!/usr/bin/env bash
# setup.sh installs the Debian packages that forkbox needs on its host:
# debootstrap for built images, the Python stack the host-derived "host"
# image is made of, Chromium and Node for the browser tests, and the tools the
# runtime and benchmarks use. (The default "python" image is built from
# images/python.yaml by `forkbox prepare`, which make run and make test call
# after this script.) It is idempotent and fast when everything is already
# installed: it asks dpkg first and only runs apt when something is missing.
# Last it installs CRIU (scripts/build-criu.sh, a no-op once built) and the
# npm packages of the browser tests and the JS SDK (npm ci in test/browser and
# sdk/js, skipped while their package-lock.json is unchanged).
# Run it as root on Debian 12 or newer (make setup does).
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

PACKAGES=(
	# Built images: debian:<suite> bases are bootstrapped from the host's
	# mirror.
	debootstrap
	# The host-derived "host" image: the host's /usr is bind-mounted into
	# sandboxes, so these are what sandbox code can import there.
	python3
	python3-ipykernel
	python3-pandas
	python3-numpy
	python3-matplotlib
	python3-scipy
	python3-seaborn
	python3-sklearn
	# A second language for code contexts: R through its Jupyter kernel.
	r-cran-irkernel
	fonts-dejavu-core
	ca-certificates
	# Runtime: filesystems, networking, process and mount tools.
	e2fsprogs
	nftables
	iproute2
	procps
	util-linux
	# Benchmark baseline.
	runc
	# Tests: notebook exports are validated with Jupyter's own nbformat;
	# the README's blocks (pasted by test/e2e/readme_test.go) use curl and jq.
	python3-nbformat
	# Tests of the Jupyter gateway (test/e2e/jupyter_test.go): a real
	# Jupyter Server pointed at forkbox with --gateway-url, and nbclient
	# executing a notebook through jupyter_server's gateway kernel client
	# (which needs python3-websocket).
	python3-jupyter-server
	python3-nbclient
	python3-websocket
	curl
	jq
	# Tests of many nodes sharing one store (test/e2e/cluster_test.go,
	# the PostgreSQL store's conformance suite): a throwaway PostgreSQL
	# cluster started by the tests (initdb in a temp dir).
	postgresql
	# Building and testing: make, and a C toolchain for `go test -race`
	# (the race detector needs cgo). Go itself is not a Debian 12 package
	# at the version we need; it is expected in /usr/local/go.
	make
	gcc
	libc6-dev
	# Browser tests of the web UI (test/browser): Playwright drives Debian's
	# Chromium headless; Node runs them (Debian's nodejs, or NodeSource's,
	# which has the same package name and brings npm along).
	chromium
	nodejs
)

log() { printf 'setup: %s\n' "$*"; }

# CRIU for memory snapshots: Debian 12's criu is too old for kernels >= 6.13,
# so build-criu.sh builds 4.2.1 from Debian's source package into
# /opt/forkbox/criu (a few minutes once; fast when it is already there).
# It runs after the apt packages, whichever way this script ends.
install_criu() { "$(dirname "${BASH_SOURCE[0]}")/build-criu.sh"; }

# npm packages pinned by a package-lock.json: playwright-core for the browser
# tests (test/browser) and the TypeScript toolchain that checks the JS SDK's
# committed dist/ (sdk/js). npm ci runs when node_modules is missing or the
# lock file changed since the last install (a stamp in node_modules records
# its hash), else nothing.
install_npm_deps() {
	local dir=$1 stamp sum
	[[ -f $dir/package-lock.json ]] || return 0
	stamp=$dir/node_modules/.forkbox-setup-lock.sha256
	sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
	if [[ -f $stamp && $(<"$stamp") == "$sum" ]]; then
		log "npm packages of ${dir##*/} up to date"
		return 0
	fi
	if ! command -v npm >/dev/null; then
		# Debian's nodejs comes without npm (NodeSource's includes it).
		log "installing npm"
		apt-get install -y -q --no-install-recommends npm
	fi
	if [[ $(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0) -lt 20 ]]; then
		log "warning: the browser tests and the JS SDK need Node.js 20 or newer; found $(node --version 2>/dev/null || echo none)" >&2
	fi
	log "running npm ci in $dir"
	(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
	echo "$sum" >"$stamp"
}

# MinIO, the S3-compatible server the object storage tests start: built from
# its Go module into /var/cache/forkbox/minio (a few minutes once; fast when
# it is already there). It builds in the background while apt and CRIU run.
minio_pid=
start_minio_build() {
	"$(dirname "${BASH_SOURCE[0]}")/build-minio.sh" &
	minio_pid=$!
}
wait_minio_build() {
	[[ -n $minio_pid ]] || return 0
	wait "$minio_pid"
}

# finish installs what is not a Debian package, whichever way the apt part
# ended.
finish() {
	local root
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	install_criu
	wait_minio_build
	install_npm_deps "$root/test/browser"
	install_npm_deps "$root/test/e2bcompat"
	install_npm_deps "$root/sdk/js"
}

if [[ $(id -u) -ne 0 ]]; then
	log "must run as root (try: sudo $0)" >&2
	exit 1
fi
start_minio_build
if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
	log "this script needs a Debian-based host (dpkg-query and apt-get)" >&2
	exit 1
fi

# One dpkg-query for all packages (a call per package is several times slower).
status=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PACKAGES[@]}" 2>/dev/null || true)
declare -A installed=()
while read -r name state; do
	if [[ $state == installed ]]; then installed[${name%%:*}]=1; fi
done <<<"$status"
missing=()
for p in "${PACKAGES[@]}"; do
	if [[ -z ${installed[$p]:-} ]]; then missing+=("$p"); fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
	log "all ${#PACKAGES[@]} packages already installed"
	finish
	exit 0
fi

log "missing packages: ${missing[*]}"
log "running apt-get update"
# A third-party source that is unreachable only warns; the Debian archive is
# what matters, and the install below fails loudly if it is out of reach.
apt-get update -q || log "apt-get update reported errors; trying the install anyway"
log "running apt-get install -y --no-install-recommends ${missing[*]}"
apt-get install -y -q --no-install-recommends "${missing[@]}"
log "installed: ${missing[*]}"

# Check what the python image promises, so a broken install shows here rather
# than at the first sandbox start. (Importing the stack takes a few seconds,
# which is why it runs only after an install.)
imports='import ipykernel, pandas, numpy, matplotlib, scipy, seaborn, sklearn'
if ! /usr/bin/python3 -c "$imports"; then
	log "/usr/bin/python3 cannot import the data-science stack after the install" >&2
	exit 1
fi
log "ok: /usr/bin/python3 can run: $imports"
finish
