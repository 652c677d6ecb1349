#!/usr/bin/env bash
# Build a real git history from a package's released source distributions (one commit per release),
# for `edit-server eval replay` on a machine that can reach PyPI but no git forge.
#
#   scripts/release_history.sh OUT PACKAGE VERSION...
#   scripts/release_history.sh /tmp/hist/toolz-history toolz 0.9.0 0.10.0 0.11.0 0.12.0 0.12.1
#
# The sdists are fetched with `pip download --no-binary :all: --no-deps` into OUT.dl/; each version's
# tree replaces the previous one in OUT (generated egg-info/PKG-INFO dropped) and is committed as
# "PACKAGE VERSION" with fixed dates, so the same arguments give the same commit hashes everywhere.
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 OUT PACKAGE VERSION..." >&2; exit 2; }
out=$1 pkg=$2
shift 2
dl="$out.dl"
mkdir -p "$dl"
rm -rf "$out" && mkdir -p "$out"
git -C "$out" init -q
i=0
for v in "$@"; do
  i=$((i + 1))
  pip download -q --no-deps --no-binary :all: --no-build-isolation -d "$dl" "$pkg==$v" >&2
  sdist=$(ls "$dl"/"$pkg"-"$v".tar.gz "$dl"/"${pkg//-/_}"-"$v".tar.gz 2>/dev/null | head -1)
  [[ -n "$sdist" ]] || { echo "no sdist for $pkg $v in $dl" >&2; exit 1; }
  find "$out" -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {} +
  tar -xzf "$sdist" -C "$out" --strip-components=1
  find "$out" -name '*.egg-info' -prune -exec rm -rf {} + ; rm -f "$out/PKG-INFO"
  git -C "$out" add -A
  GIT_AUTHOR_DATE="@$((946684800 + i * 86400)) +0000" GIT_COMMITTER_DATE="@$((946684800 + i * 86400)) +0000" \
    git -C "$out" -c user.name=releases -c user.email=releases@localhost commit -qm "$pkg $v"
done
git -C "$out" log --oneline
