#!/usr/bin/env bash
# Builds the Debian package: build-deb.sh BINARY VERSION OUTDIR.
# The binary, a systemd unit, the default config (a conffile), the docs
# and examples; postinst creates the consul-xds-bridge system user and an
# admin token. gzip, not the default xz: as portable, and seconds faster
# to build. Needs dpkg-deb (Debian's dpkg) but not root: files are owned
# by root in the package through dpkg-deb --root-owner-group.
set -euo pipefail

bin="$1" version="$2" out="$3"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$ROOT/packaging/deb"
arch="$(dpkg --print-architecture 2>/dev/null || go env GOARCH)"
# Debian versions start with a digit: "v1.2.3" -> "1.2.3", a bare commit -> "0~g<commit>".
v="${version#v}"
[[ "$v" =~ ^[0-9] ]] || v="0~g${v}"
v="${v//-/+}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
pkg="$stage/consul-xds-bridge"
install -D -m 0755 "$bin" "$pkg/usr/bin/consul-xds-bridge"
install -D -m 0644 "$HERE/consul-xds-bridge.service" "$pkg/lib/systemd/system/consul-xds-bridge.service"
install -D -m 0640 "$HERE/config.hcl" "$pkg/etc/consul-xds-bridge/config.hcl"
doc="$pkg/usr/share/doc/consul-xds-bridge"
install -D -m 0644 "$ROOT/README.md" "$doc/README.md"
install -d "$doc/examples"
install -m 0644 "$ROOT/examples/vm/"*.hcl "$ROOT/examples/vm/envoy.service" "$ROOT/examples/vm/README.md" "$doc/examples/"
install -m 0644 "$ROOT/examples/policies/"*.hcl "$doc/examples/"
install -d "$pkg/DEBIAN"
for f in postinst prerm postrm; do install -m 0755 "$HERE/$f" "$pkg/DEBIAN/$f"; done
echo /etc/consul-xds-bridge/config.hcl > "$pkg/DEBIAN/conffiles"
size="$(du -sk "$pkg" | cut -f1)"
cat > "$pkg/DEBIAN/control" <<CONTROL
Package: consul-xds-bridge
Version: $v
Architecture: $arch
Maintainer: consul-xds-bridge maintainers <noreply@consul-xds-bridge.invalid>
Installed-Size: $size
Depends: adduser, systemd | systemd-sysv
Recommends: consul
Section: net
Priority: optional
Homepage: https://github.com/consul-xds-bridge/consul-xds-bridge
Description: Consul catalog and HCL routing policy to Envoy xDS
 A control plane for Envoy and proxyless gRPC on VM fleets that run
 Consul: it watches the catalog, health and KV, combines them with
 routing policy in HCL and serves xDS (ADS, delta, REST) with a web
 console on its admin listener.
CONTROL
mkdir -p "$out"
deb="$out/consul-xds-bridge_${v}_${arch}.deb"
dpkg-deb --root-owner-group -Zgzip --build "$pkg" "$deb" >/dev/null
echo "$deb"
