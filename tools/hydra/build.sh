#!/usr/bin/env bash
# Builds Ory Hydra, the tests' OAuth authorization server, into
# .deps/tools/hydra from this module (tools/hydra/go.mod: its own module,
# so that Hydra's dependencies never enter mcpvisor's go.mod or the
# linters' tools/go.mod). Rebuilt only when the stamp changes: this
# module's go.mod and go.sum, the flags below and the Go version.
#
# The flags make the cheapest binary that serves the tests: no
# optimisation or inlining of Hydra's own packages, its sqlite (cgo)
# compiled at -O0, no symbols. The standard library keeps the default
# flags (-gcflags=std=): the other builds of make test have compiled it
# already, and its build cache is shared.
#
#   build.sh               build now, in the foreground (make hydra)
#   build.sh --background  start the build at the lowest priority and
#                          return at once (scripts/test-deps.sh): the
#                          Hydra tests wait for it (internal/testserver/hydra)
#
# While a build runs, .deps/tools/hydra.building holds its pid; its output
# goes to .deps/tools/hydra.log.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$root/.deps/tools/hydra"
stamp="$out.stamp"
marker="$out.building"
log="$out.log"
GO=${GO:-go}

tags=sqlite,sqlite_omit_load_extension
gcflags_all='-N -l'
ldflags='-s -w'
cflags='-O0 -g0'

mkdir -p "$root/.deps/tools"
# Built for this machine, whatever GOOS and GOARCH say.
export GOWORK=off GOOS=$("$GO" env GOHOSTOS) GOARCH=$("$GO" env GOHOSTARCH)
want="hydra $(cat "$here/go.mod" "$here/go.sum" | cksum) tags=$tags gcflags=all:$gcflags_all,std: ldflags=$ldflags cflags=$cflags $("$GO" env GOVERSION) $GOOS/$GOARCH"

if [ -x "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
running() { # a build other than this one runs
  local pid; pid=$(cat "$marker" 2>/dev/null || echo 0)
  [ "$pid" != $$ ] && [ "$pid" != 0 ] && kill -0 "$pid" 2>/dev/null
}
if running; then
  echo "hydra: a build is already running (pid $(cat "$marker"), log $log)" >&2
  [ "${1:-}" = --background ] && exit 0
  while running; do sleep 1; done
  [ -x "$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && exit 0
  echo "hydra: that build failed; building again" >&2
fi

if [ "${1:-}" = --background ]; then
  echo "hydra: building .deps/tools/hydra in the background, at nice 19 (log .deps/tools/hydra.log)" >&2
  # The trap gives the build back the interrupt that a shell without job
  # control takes from what it starts in the background: ^C ends it too.
  { trap - INT QUIT; exec nice -n 19 "$0" --now; } </dev/null >"$log" 2>&1 &
  echo $! >"$marker"
  exit 0
fi

echo $$ >"$marker"
trap 'rm -f "$marker" "$out.tmp"' EXIT
echo "hydra: building $out ($(date -u +%H:%M:%S))"
start=$SECONDS
cd "$here"
CGO_ENABLED=1 CGO_CFLAGS="$cflags" "$GO" build -o "$out.tmp" \
  -tags "$tags" -gcflags=all="$gcflags_all" -gcflags=std= -ldflags="$ldflags" github.com/ory/hydra/v2
rm -f "$stamp"
mv "$out.tmp" "$out"
echo "$want" >"$stamp"
echo "hydra: built in $((SECONDS - start)) s"
