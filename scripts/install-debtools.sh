#!/usr/bin/env bash
# Installs Debian's lintian and systemd (for systemd-analyze and
# systemd-sysusers) when missing: the packaging tests run lintian on the
# .deb, score the units with systemd-analyze security, and install the
# package into a throwaway root.
#
# Under CI=true a failure (not root, no apt-get, no package) fails the
# build, so those tests cannot quietly become skips; elsewhere it prints
# why and exits 0, and those tests skip with the same hint.
set -euo pipefail

ci=false
case "${CI:-}" in 1|t|T|true|TRUE|True) ci=true ;; esac

fail() {
  echo "install-debtools: $*" >&2
  if $ci; then
    exit 1
  fi
  echo "install-debtools: the packaging tests will skip (they fail under CI=true)" >&2
  exit 0
}

need=()
command -v lintian >/dev/null || need+=(lintian)
{ command -v systemd-analyze >/dev/null && command -v systemd-sysusers >/dev/null; } || need+=(systemd)
command -v deb-systemd-helper >/dev/null || need+=(init-system-helpers)
command -v dpkg-deb >/dev/null || need+=(dpkg)
[[ ${#need[@]} == 0 ]] && exit 0

command -v apt-get >/dev/null || fail "no apt-get to install ${need[*]}"
sudo=""
if [[ "$(id -u)" != 0 ]]; then
  command -v sudo >/dev/null || fail "run as root (or with sudo) to apt-get install ${need[*]}"
  sudo="sudo -n"
fi
echo "install-debtools: apt-get install ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine has no package lists yet; update only when the
# install cannot find the packages.
$sudo apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
  { $sudo apt-get update -qq && $sudo apt-get install -y --no-install-recommends "${need[@]}"; } ||
  fail "apt-get install ${need[*]} failed"
command -v lintian >/dev/null || fail "lintian installed but not on PATH"
