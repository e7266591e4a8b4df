#!/usr/bin/env bash
# Installs grpc-node (@grpc/grpc-js + @grpc/grpc-js-xds), the second real
# xDS client of the proxyless end-to-end tests, into the project's tools
# folder with `npm ci` from the committed lock file
# (internal/grpcnode/package-lock.json), once per lock file.
#
# Under CI=true a failure (no node or npm, no registry) fails the build, so
# the grpc-node tests cannot quietly become skips; elsewhere it prints why
# and exits 0, and those tests skip with the same hint.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/internal/grpcnode"
DEST="${GRPC_NODE_INSTALL_DIR:-$ROOT/.tools/node}"

ci=false
case "${CI:-}" in 1|t|T|true|TRUE|True) ci=true ;; esac

fail() {
  echo "install-grpc-node: $*" >&2
  if $ci; then
    exit 1
  fi
  echo "install-grpc-node: the grpc-node tests will skip (they fail under CI=true)" >&2
  exit 0
}

# Up to date: installed from this very lock file.
if [[ -f "$DEST/package-lock.json" ]] && cmp -s "$DEST/package-lock.json" "$SRC/package-lock.json" &&
  [[ -f "$DEST/node_modules/@grpc/grpc-js-xds/package.json" ]]; then
  exit 0
fi

command -v node >/dev/null || fail "node not found on PATH (Node 20 or later is needed)"
command -v npm >/dev/null || fail "npm not found on PATH"

echo "install-grpc-node: npm ci into $DEST" >&2
# Install beside the destination and move it in place only when complete,
# so an interrupted install never looks installed.
TMP="$DEST.tmp"
rm -rf "$TMP"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
cp "$SRC/package.json" "$SRC/package-lock.json" "$TMP/"
# --ignore-scripts: nothing here needs an install script (re2-wasm and
# xxhash-wasm ship WebAssembly), and none should run on a test machine.
if ! (cd "$TMP" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error); then
  fail "npm ci failed"
fi
rm -rf "$DEST"
mv "$TMP" "$DEST"
trap - EXIT
