#!/usr/bin/env bash
# podman on the storage of make images (.deps/containers: vfs, state and
# temporary files there too), so that nothing goes to the user's storage:
#   deploy/docker/podman.sh images
#   deploy/docker/podman.sh image inspect mcpvisor:dev
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
c=${MCPVISOR_CONTAINERS:-$root/.deps/containers}
mkdir -p "$c/storage" "$c/run" "$c/tmp"
exec podman --root "$c/storage" --runroot "$c/run" --tmpdir "$c/tmp" --storage-driver vfs \
  --cgroup-manager cgroupfs --events-backend none "$@"
