#!/usr/bin/env bash
# build-criu.sh installs CRIU, the checkpoint/restore tool behind memory
# snapshots, as /opt/forkbox/criu/sbin/criu (where internal/criu looks first).
#
# Debian 12's own criu (3.17) fails on kernels >= 6.13 (new vDSO layout), so
# this builds CRIU 4.2.1 from Debian's source package in sid/forky:
#   1. installs the build dependencies from the host's normal Debian suites;
#   2. reads the Debian mirror the host's apt uses and, through a private apt
#      configuration under /var/cache/forkbox/apt-src (its own sources list,
#      lists and cache; the system's /etc/apt sources are not touched), runs
#      `apt-get source --download-only criu=4.2.1-1` (or the newest 4.x there);
#   3. unpacks it (dpkg-source -x, or the checksum-verified upstream tarball
#      alone when the mirror lacks Debian's packaging tarball), runs
#      `make criu` (the binary only: no docs, no libraries, no plugins) with
#      /run/forkbox/criu as CRIU's run dir (its kernel-feature cache) and
#      installs the binary with a VERSION file under /opt/forkbox/criu.
# It is idempotent and fast: when /opt/forkbox/criu/sbin/criu already reports
# version 4.2 or newer it does nothing. Run it as root (setup.sh calls it).
#
# Environment:
#   FORKBOX_CRIU_REBUILD=1      build even when a good binary is installed
#   FORKBOX_DEBIAN_MIRROR=URL   mirror for the source package (default: the
#                               one the host's apt uses for its Debian suite)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

WANT_VERSION=4.2.1-1 # Debian source version to build
MIN_VERSION=4.2      # older CRIU does not work on kernels >= 6.13
PREFIX=/opt/forkbox/criu
# CRIU's run dir, where it keeps its kernel-feature cache (criu.kdat) when
# that is a tmpfs; the daemon makes it one (internal/criu/kdat_linux.go).
KDAT_DIR=/run/forkbox/criu
# forkbox's own patches to CRIU, applied in name order; the installed build
# records their checksum and is rebuilt when they change.
PATCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/criu-patches
patch_sum=$(cat "$PATCH_DIR"/*.patch 2>/dev/null | sha256sum | cut -c1-16)
APT_DIR=/var/cache/forkbox/apt-src # private apt configuration and state
WORK=/var/cache/forkbox/criu       # downloaded sources, build tree, build log
# sid first; forky (testing) keeps a version for a while after sid moves on.
SUITES=(sid forky)

# The minimal set that `make criu` needs, found by building on a bare
# Debian 12 (Debian's full Build-Depends also pulls in the docs toolchain,
# asciidoc and xmlto, and the Python bindings, which the binary does not need).
BUILD_DEPS=(
	gcc
	make
	libc6-dev
	pkgconf
	dpkg-dev # dpkg-source
	xz-utils
	patch # forkbox's CRIU patches
	protobuf-c-compiler # protoc-c for CRIU's image format
	protobuf-compiler   # protoc, which runs the protoc-c plugin
	libprotobuf-dev     # google/protobuf/descriptor.proto
	libprotobuf-c-dev
	libnl-3-dev
	libnet1-dev
	libcap-dev
	uuid-dev
	# Optional, but wanted: lets CRIU lock the network with nftables
	# (--network-lock nftables) on hosts without iptables, like ours.
	libnftables-dev
)

log() { printf 'build-criu: %s\n' "$*"; }
die() {
	printf 'build-criu: ERROR: %s\n' "$*" >&2
	exit 1
}

# installed_version prints the version the installed binary reports
# ("4.2.1"), or nothing when there is no working binary.
installed_version() {
	local out
	out=$("$PREFIX/sbin/criu" --version 2>/dev/null) || return 0
	sed -n 's/^Version: *//p' <<<"$out"
}

# up_to_date succeeds when the installed binary is new enough; it leaves
# the version that binary reports in $have.
have=""
up_to_date() {
	have=$(installed_version)
	[[ -z ${FORKBOX_CRIU_REBUILD:-} && -n $have ]] && dpkg --compare-versions "$have" ge "$MIN_VERSION" &&
		grep -qx "forkbox-patches: $patch_sum" "$PREFIX/VERSION" 2>/dev/null &&
		grep -qx "kdat-dir: $KDAT_DIR" "$PREFIX/VERSION" 2>/dev/null
}

if up_to_date; then
	log "CRIU $have already installed at $PREFIX/sbin/criu; nothing to do"
	exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
	die "must run as root to build and install CRIU (try: sudo $0)"
fi
for tool in apt-get apt-cache dpkg-query; do
	command -v "$tool" >/dev/null || die "this script needs a Debian-based host ($tool is missing)"
done

started=$SECONDS
mkdir -p "$APT_DIR" "$WORK"

# One build at a time; a run that waited re-checks what the other installed.
exec 9>"$WORK/.lock"
flock 9
if up_to_date; then
	log "CRIU $have was installed at $PREFIX/sbin/criu meanwhile; nothing to do"
	exit 0
fi

if [[ -n ${FORKBOX_CRIU_REBUILD:-} ]]; then
	log "FORKBOX_CRIU_REBUILD is set: rebuilding CRIU (installed: ${have:-none})"
elif [[ -n $have ]]; then
	log "$PREFIX/sbin/criu reports $have: rebuilding (older than $MIN_VERSION, or built with other forkbox patches or run dir than $PREFIX/VERSION records)"
else
	log "no CRIU at $PREFIX/sbin/criu; building CRIU $WANT_VERSION from Debian's source package"
fi

# --- 1. build dependencies, from the host's own suites ---------------------
status=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${BUILD_DEPS[@]}" 2>/dev/null || true)
declare -A installed=()
while read -r name state; do
	if [[ $state == installed ]]; then installed[${name%%:*}]=1; fi
done <<<"$status"
missing=()
for p in "${BUILD_DEPS[@]}"; do
	if [[ -z ${installed[$p]:-} ]]; then missing+=("$p"); fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
	log "installing build dependencies: ${missing[*]}"
	apt-get update -q || log "apt-get update reported errors; trying the install anyway"
	apt-get install -y -q --no-install-recommends "${missing[@]}" ||
		die "could not install CRIU's build dependencies: ${missing[*]}"
else
	log "build dependencies already installed (${#BUILD_DEPS[@]} packages)"
fi

# --- 2. the source package, through a private apt configuration ------------

# debian_mirror prints the URI the host's apt uses for its own Debian suite.
# (The single-quoted $(...) are apt's format fields, not shell.)
# shellcheck disable=SC1091,SC2016
debian_mirror() {
	if [[ -n ${FORKBOX_DEBIAN_MIRROR:-} ]]; then
		echo "$FORKBOX_DEBIAN_MIRROR"
		return
	fi
	local codename line
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	# With the host's lists present, the Release files name the archive.
	line=$(apt-get indextargets --format '$(ORIGIN)|$(LABEL)|$(CODENAME)|$(REPO_URI)' \
		'Created-By: Packages' 2>/dev/null |
		awk -F'|' -v c="$codename" '!found && $1 == "Debian" && $2 == "Debian" && $3 == c { print $4; found = 1 }')
	if [[ -z $line ]]; then
		# No lists yet: match the suite as written in /etc/apt/sources.list*.
		line=$(apt-get indextargets --no-release-info --format '$(RELEASE)|$(REPO_URI)' \
			'Created-By: Packages' 2>/dev/null |
			awk -F'|' -v c="$codename" '!found && $1 == c { print $2; found = 1 }')
	fi
	echo "$line"
}

mirror=$(debian_mirror)
[[ -n $mirror ]] || die "found no Debian mirror for this host's suite in /etc/apt/sources.list*; set FORKBOX_DEBIAN_MIRROR (e.g. http://deb.debian.org/debian)"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
signed_by=""
if [[ -r $keyring ]]; then signed_by=" [signed-by=$keyring]"; fi

mkdir -p "$APT_DIR/etc/sources.list.d" "$APT_DIR/etc/preferences.d" \
	"$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial" "$APT_DIR/state"
{
	echo "# Written by forkbox scripts/build-criu.sh: source packages only."
	for suite in "${SUITES[@]}"; do
		echo "deb-src$signed_by $mirror $suite main"
	done
} >"$APT_DIR/etc/sources.list"
cat >"$APT_DIR/apt.conf" <<EOF
// Written by forkbox scripts/build-criu.sh. A private apt configuration: the
// host's apt.conf.d settings (proxies) still apply, its sources do not.
Dir::Etc::sourcelist "$APT_DIR/etc/sources.list";
Dir::Etc::sourceparts "$APT_DIR/etc/sources.list.d";
Dir::Etc::preferences "$APT_DIR/etc/preferences";
Dir::Etc::preferencesparts "$APT_DIR/etc/preferences.d";
Dir::State "$APT_DIR/state";
Dir::State::lists "$APT_DIR/lists";
Dir::Cache "$APT_DIR/cache";
EOF
export APT_CONFIG=$APT_DIR/apt.conf

log "fetching source indexes of ${SUITES[*]} from $mirror (private config $APT_CONFIG)"
apt-get update -q >"$WORK/apt-update.log" 2>&1 || {
	cat "$WORK/apt-update.log" >&2
	die "apt-get update of the source indexes failed (mirror $mirror)"
}

mapfile -t versions < <(apt-cache madison criu 2>/dev/null | awk -F'|' '{ gsub(/ /, "", $2); print $2 }' | sort -u)
if [[ ${#versions[@]} -eq 0 ]]; then
	grep -E '^(W|E|Err):' "$WORK/apt-update.log" >&2 || true
	die "no criu source package in ${SUITES[*]} at $mirror (apt-get update said the above)"
fi
version=""
for v in "${versions[@]}"; do
	if [[ $v == "$WANT_VERSION" ]]; then version=$v; fi
done
if [[ -z $version ]]; then
	# Fall back to the newest 4.x that is at least MIN_VERSION.
	for v in "${versions[@]}"; do
		if dpkg --compare-versions "$v" ge "$MIN_VERSION~" && dpkg --compare-versions "$v" lt 5~ &&
			{ [[ -z $version ]] || dpkg --compare-versions "$v" gt "$version"; }; then
			version=$v
		fi
	done
	[[ -n $version ]] || die "criu $WANT_VERSION is not in ${SUITES[*]} at $mirror, nor any 4.x >= $MIN_VERSION (found: ${versions[*]})"
	log "NOTE: criu $WANT_VERSION is gone from ${SUITES[*]}; building $version, the newest 4.x there"
fi
upstream=${version#*:}
upstream=${upstream%-*}
from=$(apt-cache madison criu | awk -F'|' -v v="$version" '{ gsub(/ /, "", $2) } !found && $2 == v { sub(/^ +/, "", $3); print $3; found = 1 }')
log "source package: criu $version ($from)"

srcdir=$WORK/src
mkdir -p "$srcdir"
# apt downloads as its unprivileged _apt user when that user can write here.
if getent passwd _apt >/dev/null; then chown _apt "$srcdir"; fi
download_ok=1
(cd "$srcdir" && apt-get source --download-only -q "criu=$version") >"$WORK/apt-source.log" 2>&1 || download_ok=0

# The indexes (~50 MB) are fetched afresh for each build: drop them.
find "$APT_DIR/lists" -maxdepth 1 -type f ! -name lock -delete

dsc=$srcdir/criu_${version#*:}.dsc
[[ -s $dsc ]] || {
	cat "$WORK/apt-source.log" >&2
	die "could not download criu_$version.dsc from $mirror"
}
# Check every file the .dsc lists (apt checked the .dsc against the signed
# index); remember which are missing: some mirrors lack one of them.
orig="" missing_files=()
while read -r sum size name; do
	[[ -n $name ]] || continue
	if [[ ! -f $srcdir/$name ]]; then
		missing_files+=("$name")
		continue
	fi
	echo "$sum  $srcdir/$name" | sha256sum --quiet -c - ||
		die "$srcdir/$name does not match the sha256 in $(basename "$dsc") ($size bytes expected); delete it and retry"
	if [[ $name == *.orig.tar.* ]]; then orig=$srcdir/$name; fi
done < <(awk '/^Checksums-Sha256:/ { f = 1; next } /^[^ ]/ { f = 0 } f { print $1, $2, $3 }' "$dsc")

builddir=$WORK/build
rm -rf "$builddir"
mkdir -p "$builddir"
tree=$builddir/criu-$upstream
if [[ ${#missing_files[@]} -eq 0 ]]; then
	patches="Debian's patches applied (dpkg-source -x)"
	log "unpacking with dpkg-source -x $(basename "$dsc")"
	dpkg-source -x "$dsc" "$tree" >"$WORK/dpkg-source.log" 2>&1 || {
		cat "$WORK/dpkg-source.log" >&2
		die "dpkg-source -x $dsc failed"
	}
elif [[ -n $orig && ${#missing_files[@]} -eq 1 && ${missing_files[0]} == *.debian.tar.* ]]; then
	# The upstream tarball is all `make criu` needs; Debian's tarball holds
	# its packaging and patches, which the checksums above cannot replace.
	patches="upstream tarball only: the mirror lacked ${missing_files[0]}"
	log "NOTE: the mirror does not serve ${missing_files[0]} (see $WORK/apt-source.log);"
	log "      building the checksum-verified upstream tarball $(basename "$orig") without Debian's patches"
	mkdir -p "$tree"
	tar -xf "$orig" -C "$tree" --strip-components=1 || die "could not unpack $orig"
else
	cat "$WORK/apt-source.log" >&2
	die "could not download criu $version's source (missing: ${missing_files[*]})"
fi
if [[ $download_ok -eq 0 && ${#missing_files[@]} -eq 0 ]]; then
	log "apt-get source reported errors but every file is present and verified"
fi

for p in "$PATCH_DIR"/*.patch; do
	[[ -e $p ]] || continue
	log "applying forkbox patch $(basename "$p")"
	patch -p1 -d "$tree" <"$p" >"$WORK/patch.log" 2>&1 || {
		cat "$WORK/patch.log" >&2
		die "patch $(basename "$p") does not apply to criu $version"
	}
done

# --- 3. build and install ---------------------------------------------------
jobs=$(nproc 2>/dev/null || echo 2)
log "building: make -j$jobs criu in $tree (log: $WORK/build.log)"
build_started=$SECONDS
if ! make -C "$tree" -j"$jobs" criu RUNDIR="$KDAT_DIR" >"$WORK/build.log" 2>&1; then
	tail -n 40 "$WORK/build.log" >&2
	die "make criu failed; the full log is $WORK/build.log"
fi
# CRIU's own notes on optional features it built without.
grep -E '^(Note|Warn):' "$WORK/build.log" | sed 's/^/build-criu:   criu build: /' || true
log "built in $((SECONDS - build_started))s"

new=$("$tree/criu/criu" --version | sed -n 's/^Version: *//p')
dpkg --compare-versions "${new:-0}" ge "$MIN_VERSION" ||
	die "the built binary reports version '${new:-?}', older than $MIN_VERSION"

install -d -m 0755 "$PREFIX/sbin"
install -m 0755 "$tree/criu/criu" "$PREFIX/sbin/.criu.new"
mv -f "$PREFIX/sbin/.criu.new" "$PREFIX/sbin/criu"
cat >"$PREFIX/.VERSION.new" <<EOF
$version
criu: $new
source: Debian source package criu $version ($from)
patches: $patches
forkbox-patches: $patch_sum
kdat-dir: $KDAT_DIR
built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -r) by scripts/build-criu.sh
EOF
mv -f "$PREFIX/.VERSION.new" "$PREFIX/VERSION"
rm -rf "$builddir"
log "installed CRIU $new at $PREFIX/sbin/criu ($patches)"

# A quick look at the host; warnings here are not fatal to the install
# (internal/criu.Check decides what forkbox can use).
if check=$("$PREFIX/sbin/criu" check 2>&1); then
	log "criu check: $(tr '\n' ' ' <<<"$check")"
else
	log "WARNING: criu check failed on this host: $(tr '\n' ' ' <<<"$check")"
fi
log "done in $((SECONDS - started))s"
