#!/usr/bin/env bash
# Builds the Debian package with nfpm: build-deb.sh BINARY VERSION OUTDIR.
#
# BINARY is the built command (`make package` builds it stripped and PIE),
# VERSION the package version (packaging/version.sh: 0.3.1 on a tag,
# 0.3.2~git<time>.<n>.g<hash> between tags). The package: the binary, the
# bridge's and the agent's systemd units, the system user (sysusers.d),
# the default config (a conffile), the manual page, copyright and
# changelog, and under /usr/share/doc/consul-xds-bridge/examples every
# sample the docs name. gzip, not xz: as portable, and seconds faster.
# Needs nfpm ($NFPM, default nfpm on PATH; scripts/install-nfpm.sh) and
# gzip; not root.
set -euo pipefail

bin="$1" version="$2" out="$3"
NFPM="${NFPM:-nfpm}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$ROOT/packaging"
arch="$(dpkg --print-architecture 2>/dev/null || go env GOARCH)"
if [[ ! "$version" =~ ^[0-9][A-Za-z0-9.+~]*$ ]]; then
  echo "build-deb: version \"$version\" is not a Debian upstream version (digits first; letters, digits, . + ~): use packaging/version.sh" >&2
  exit 2
fi
command -v "$NFPM" >/dev/null || { echo "build-deb: nfpm not found ($NFPM): run scripts/install-nfpm.sh or make package" >&2; exit 1; }

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$bin" "$stage/consul-xds-bridge"
gzip -9n < "$HERE/deb/consul-xds-bridge.1" > "$stage/consul-xds-bridge.1.gz"

doc="$stage/doc"
ex="$doc/examples"
install -d "$ex"
install -m 0644 "$ROOT/README.md" "$ROOT/SECURITY.md" "$doc/"
gzip -9n < "$ROOT/CHANGELOG.md" > "$doc/CHANGELOG.md.gz"
install -m 0644 "$HERE/deb/copyright" "$doc/copyright"
# The docs tree beside the README, so the README's links work offline.
(cd "$ROOT" && find docs -type f \( -name '*.md' -o -name '*.png' \) -print0 | sort -z) |
  while IFS= read -r -d '' f; do install -D -m 0644 "$ROOT/$f" "$doc/$f"; done
# A native package's changelog, in Debian's format, dated by the commit
# so that two builds of one commit are the same.
when="$(git -C "$ROOT" log -1 --format=%cD 2>/dev/null || date -R)"
{
  echo "consul-xds-bridge ($version) unstable; urgency=medium"
  echo
  echo "  * Built from $(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo 'an unknown commit')."
  echo "    Changes: /usr/share/doc/consul-xds-bridge/CHANGELOG.md.gz."
  echo
  echo " -- consul-xds-bridge maintainers <noreply@consul-xds-bridge.invalid>  $when"
} | gzip -9n > "$doc/changelog.gz"

# The samples: VM configs, policies with the catalog fixture their route
# tests run against, and Envoy's unit calling the packaged /usr/bin
# binary. The bridge's and the agent's units are installed, not samples.
install -m 0644 "$ROOT/examples/vm/"*.hcl "$ROOT/examples/vm/README.md" "$ex/"
install -m 0644 "$ROOT/examples/policies/"*.hcl "$ROOT/examples/policies/"*.json "$ex/"
sed 's#/usr/local/bin/consul-xds-bridge#/usr/bin/consul-xds-bridge#g' "$ROOT/examples/vm/envoy.service" > "$ex/envoy.service"
chmod 0644 "$ex/envoy.service"
chmod -R u=rwX,go=rX "$doc"

mkdir -p "$out"
deb="$out/consul-xds-bridge_${version}_${arch}.deb"
rm -f "$deb"
cp -r "$HERE/deb" "$stage/deb"
(cd "$stage" && PKG_VERSION="$version" PKG_ARCH="$arch" \
  "$NFPM" package --config "$HERE/nfpm.yaml" --packager deb --target "$deb" >/dev/null)
echo "$deb"
