#!/usr/bin/env bash
# Builds Consul from its Go module into the project's tools folder, once.
#
# No Consul package is available from the registries this project may use, so we
# build the last MPL-2.0 release (v1.15.4) from source. The module's go.mod
# replaces its sub-modules with folders the module zip does not contain; dropping
# those replaces and pinning api v1.25.1 makes it build with plain `go build`.
set -euo pipefail

VERSION="${CONSUL_VERSION:-1.15.4}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${CONSUL_INSTALL_DIR:-$ROOT/.tools/bin}"
BIN="$DEST/consul"

# Read the whole output: piping into head would SIGPIPE consul, which
# pipefail turns into a failure.
installed_version() {
  local out
  out="$("$BIN" version 2>/dev/null || true)"
  printf '%s\n' "${out%%$'\n'*}"
}

if [[ -x "$BIN" ]] && [[ "$(installed_version)" == "Consul v$VERSION" ]]; then
  exit 0
fi

echo "install-consul: building Consul v$VERSION into $DEST (takes a few minutes on a cold cache)" >&2
mkdir -p "$DEST"
SRC="$(go mod download -json "github.com/hashicorp/consul@v$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [[ -z "$SRC" || ! -d "$SRC" ]]; then
  echo "install-consul: go mod download did not give a source folder for consul v$VERSION" >&2
  exit 1
fi

TMP="$(mktemp -d)"
trap 'chmod -R u+w "$TMP" 2>/dev/null; rm -rf "$TMP"' EXIT
cp -r "$SRC" "$TMP/consul"
chmod -R u+w "$TMP/consul"
cd "$TMP/consul"
for m in api envoyextensions proto-public sdk troubleshoot; do
  go mod edit -dropreplace "github.com/hashicorp/consul/$m"
done
# The build runs outside our module; keep our GOFLAGS (e.g. -mod=vendor) out of it.
export GOFLAGS=-mod=mod GOWORK=off
go get github.com/hashicorp/consul/api@v1.25.1
go build -o "$BIN.tmp" .
mv "$BIN.tmp" "$BIN"
got="$(installed_version)"
if [[ "$got" != "Consul v$VERSION" ]]; then
  echo "install-consul: built binary reports \"$got\", want Consul v$VERSION" >&2
  exit 1
fi
echo "install-consul: $got" >&2
