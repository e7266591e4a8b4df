#!/usr/bin/env bash
# Builds nfpm (the Debian packager `make package` uses) from its Go module
# at a pinned version into .tools/bin/nfpm-VERSION: install-nfpm.sh [DIR].
# Go modules only, no download of a prebuilt binary. Under CI=true a
# failure fails the build, so the packaging tests cannot quietly skip;
# elsewhere it prints why and exits 0.
set -euo pipefail

NFPM_VERSION="${NFPM_VERSION:-v2.48.0}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$ROOT/.tools/bin}"
target="$dir/nfpm-$NFPM_VERSION"

ci=false
case "${CI:-}" in 1|t|T|true|TRUE|True) ci=true ;; esac

[[ -x "$target" ]] && exit 0
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "install-nfpm: go install github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION" >&2
if ! (cd "$tmp" && GOBIN="$tmp/bin" GOFLAGS=-mod=mod go install "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION"); then
  echo "install-nfpm: building nfpm $NFPM_VERSION failed (is the Go module proxy reachable?)" >&2
  if $ci; then exit 1; fi
  echo "install-nfpm: make package and the packaging tests need it; they skip (and fail under CI=true)" >&2
  exit 0
fi
mv "$tmp/bin/nfpm" "$target"
