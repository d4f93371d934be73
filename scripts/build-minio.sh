#!/usr/bin/env bash
# build-minio.sh installs MinIO, the S3-compatible object store that the
# tests of forkbox's object-storage blobs start (internal/blob,
# test/e2e/cluster_test.go), as /var/cache/forkbox/minio/<version>/minio.
# It builds it from its Go module with the Go toolchain forkbox builds with
# (a few minutes once) and does nothing when that binary is already there.
# Tests find it through FORKBOX_MINIO, else at that path. Run it as root
# (setup.sh calls it).
set -euo pipefail

VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
DIR=/var/cache/forkbox/minio/$VERSION
BIN=$DIR/minio
log() { printf 'build-minio: %s\n' "$*"; }

if [[ -x $BIN ]] && "$BIN" --version >/dev/null 2>&1; then
	log "MinIO $VERSION already built"
	exit 0
fi
GO=$(command -v go || echo /usr/local/go/bin/go)
if [[ ! -x $GO ]]; then
	log "no Go toolchain found (looked on PATH and in /usr/local/go)" >&2
	exit 1
fi
mkdir -p "$DIR"
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log "building MinIO $VERSION (a few minutes once; log in $DIR/build.log)"
if ! GOBIN=$tmp GOFLAGS=-mod=mod "$GO" install "github.com/minio/minio@$VERSION" >"$DIR/build.log" 2>&1; then
	tail -20 "$DIR/build.log" >&2
	log "building MinIO failed" >&2
	exit 1
fi
mv "$tmp/minio" "$BIN"
log "MinIO $VERSION built: $BIN"
