#!/usr/bin/env bash
# Builds Helm (v4, the chart's linter and renderer) and chartcheck (its
# rendered manifests as JSON, for the chart's tests: ./chartcheck) into
# .deps/tools/helm and .deps/tools/chartcheck from this module
# (tools/helm/go.mod: its own module, so that Helm's dependencies — the
# Kubernetes client libraries and the YAML parsers — never enter
# mcpvisor's go.mod or the linters' tools/go.mod). Rebuilt only when the
# stamp changes: this module's go.mod and go.sum, chartcheck's source,
# the flags below and the Go version.
#
# The flags make the cheapest binaries that serve the tests: no
# optimisation or inlining of Helm's own packages and its dependencies,
# no symbols. The standard library keeps the default flags (-gcflags=std=):
# the other builds of make test have compiled it already, and its build
# cache is shared.
#
#   build.sh               build now, in the foreground (make helm)
#   build.sh --background  start the build at the lowest priority and
#                          return at once (scripts/test-deps.sh): the
#                          chart's tests wait for it (deploy/)
#
# While a build runs, .deps/tools/helm.building holds its pid; its output
# goes to .deps/tools/helm.log.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tools="$root/.deps/tools"
out="$tools/helm"
stamp="$out.stamp"
marker="$out.building"
log="$out.log"
GO=${GO:-go}

gcflags_all='-N -l'
ldflags='-s -w'

mkdir -p "$tools"
# Built for this machine, whatever GOOS and GOARCH say.
export GOWORK=off GOOS=$("$GO" env GOHOSTOS) GOARCH=$("$GO" env GOHOSTARCH)
want="helm $(cat "$here/go.mod" "$here/go.sum" "$here"/chartcheck/*.go | cksum) gcflags=all:$gcflags_all,std: ldflags=$ldflags $("$GO" env GOVERSION) $GOOS/$GOARCH"

if [ -x "$out" ] && [ -x "$tools/chartcheck" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
running() { # a build other than this one runs
  local pid; pid=$(cat "$marker" 2>/dev/null || echo 0)
  [ "$pid" != $$ ] && [ "$pid" != 0 ] && kill -0 "$pid" 2>/dev/null
}
if running; then
  echo "helm: a build is already running (pid $(cat "$marker"), log $log)" >&2
  [ "${1:-}" = --background ] && exit 0
  while running; do sleep 1; done
  [ -x "$out" ] && [ -x "$tools/chartcheck" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && exit 0
  echo "helm: that build failed; building again" >&2
fi

if [ "${1:-}" = --background ]; then
  echo "helm: building .deps/tools/helm in the background, at nice 19 (log .deps/tools/helm.log)" >&2
  # The trap gives the build back the interrupt that a shell without job
  # control takes from what it starts in the background: ^C ends it too.
  { trap - INT QUIT; exec nice -n 19 "$0" --now; } </dev/null >"$log" 2>&1 &
  echo $! >"$marker"
  exit 0
fi

echo $$ >"$marker"
trap 'rm -rf "$marker" "$out.tmp"' EXIT
echo "helm: building $out and $tools/chartcheck ($(date -u +%H:%M:%S))"
start=$SECONDS
cd "$here"
mkdir -p "$out.tmp"
"$GO" build -o "$out.tmp/" -gcflags=all="$gcflags_all" -gcflags=std= -ldflags="$ldflags" \
  helm.sh/helm/v4/cmd/helm ./chartcheck
rm -f "$stamp"
mv "$out.tmp/chartcheck" "$tools/chartcheck"
mv "$out.tmp/helm" "$out.bin"
rmdir "$out.tmp"
mv "$out.bin" "$out"
echo "$want" >"$stamp"
echo "helm: built in $((SECONDS - start)) s"
