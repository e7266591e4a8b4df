#!/usr/bin/env bash
# Prints the package version of the git checkout it runs in, one that
# dpkg orders as releases are ordered:
#
#   on tag v0.3.1                      0.3.1
#   commits after v0.3.1               0.3.2~git20261204T182217.5.gabc1234
#   no tag yet                         0.0.1~git20261204T182217.12.gabc1234
#   uncommitted changes                ... +dirty appended
#
# A snapshot sorts after the release it follows and before the next patch
# release ("~" sorts before anything); among snapshots the commit time
# (UTC), then the number of commits since the tag order them, so neither
# depends on the hash, which dpkg cannot order. Tags are vMAJOR.MINOR.PATCH.
set -euo pipefail

cd "${1:-.}"
desc="$(git describe --tags --long --match 'v[0-9]*.[0-9]*.[0-9]*' 2>/dev/null || true)"
count="$(git rev-list --count HEAD)"
tag=""
if [[ "$desc" =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)-([0-9]+)-g[0-9a-f]+$ ]]; then
  tag="${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.${BASH_REMATCH[3]}"
  next="${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.$((BASH_REMATCH[3] + 1))"
  count="${BASH_REMATCH[4]}"
else
  next="0.0.1"
fi
dirty=""
if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  dirty="+dirty"
fi
if [[ -n "$tag" && "$count" == 0 ]]; then
  echo "${tag}${dirty}"
  exit 0
fi
when="$(TZ=UTC git log -1 --date=format-local:%Y%m%dT%H%M%S --format=%cd)"
hash="$(git rev-parse --short=7 HEAD)"
echo "${next}~git${when}.${count}.g${hash}${dirty}"
