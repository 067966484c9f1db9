#!/usr/bin/env bash
# Builds mcpvisor's images with podman (make images): the build context
# (deploy/docker/context.sh), then mcpvisor:TAG (Dockerfile) and
# mcpvisor:TAG-node (Dockerfile.node, on top of the first); TAG is $TAG,
# else dev.
#
# The images go to a storage of their own, .deps/containers (vfs: no
# overlay mount needed), never to the user's: use deploy/docker/podman.sh
# to see them, or push them:
#   deploy/docker/podman.sh images
#   deploy/docker/podman.sh push mcpvisor:dev docker://registry.example.com/mcpvisor:dev
# Nothing runs in a container: the Dockerfiles have no RUN, and the build
# isolation is chroot (no runtime, no network namespace). Needs podman on
# Linux (scripts/test-deps.sh installs it with apt-get as root).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ctx=${MCPVISOR_DOCKER_CONTEXT:-$root/.deps/docker}
TAG=${TAG:-dev}
podman=("$here/podman.sh")

version=$(cd "$root" && git describe --tags --always --dirty 2>/dev/null || echo dev)
MCPVISOR_VERSION=$version "$here/context.sh"

revision=$(cd "$root" && git rev-parse HEAD 2>/dev/null || echo unknown)
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "CREATED=$created")

start=$SECONDS
"${podman[@]}" build --isolation chroot --layers=false --pull=never "${args[@]}" \
  -f "$here/Dockerfile" -t "mcpvisor:$TAG" "$ctx"
echo "images: mcpvisor:$TAG built in $((SECONDS - start)) s" >&2
start=$SECONDS
"${podman[@]}" build --isolation chroot --layers=false --pull=never "${args[@]}" \
  --build-arg "BASE=localhost/mcpvisor:$TAG" \
  -f "$here/Dockerfile.node" -t "mcpvisor:$TAG-node" "$ctx"
echo "images: mcpvisor:$TAG-node built in $((SECONDS - start)) s" >&2
# The images these tags named before: vfs keeps each one whole.
"${podman[@]}" image prune -f >/dev/null
