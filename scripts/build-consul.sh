#!/usr/bin/env bash
# Builds a consul binary from its Go module and caches it, for machines
# without a packaged Consul or a Docker engine. The cached binary is reused on
# later runs. Usage: scripts/build-consul.sh [version]; prints the binary path.
#
# Consul's own go.mod points its api/sdk/envoyextensions/proto-public/
# troubleshoot modules at local directories with replace directives, which Go
# ignores when consul is a dependency. So the throw-away module below requires
# those modules at the versions consul's go.mod lists, and repeats its
# excludes.
set -euo pipefail

version=${1:-${CONSUL_VERSION:-1.20.1}}
cache=${CERBERUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cerberus}
bin="$cache/consul-$version/consul"

if [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi

mkdir -p "$(dirname "$bin")"
# One build at a time: a second caller waits for the first and reuses its binary.
exec 9>"$(dirname "$bin")/.build.lock"
if ! flock -n 9; then
  echo "build-consul: another build of consul v$version is running; waiting for it" >&2
  flock 9
fi
if [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

# Read the submodule versions from consul's own go.mod.
gomod=$(go mod download -json "github.com/hashicorp/consul@v$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -f "$gomod" ] || { echo "build-consul: cannot download github.com/hashicorp/consul@v$version" >&2; exit 1; }

{
  echo "module cerberus.local/consulbuild"
  echo
  echo "go 1.22"
  echo
  echo "require ("
  echo "	github.com/hashicorp/consul v$version"
  grep -E '^[[:space:]]+github.com/hashicorp/consul/(api|sdk|envoyextensions|proto-public|troubleshoot) v' "$gomod" | sed 's/ \/\/ indirect//'
  echo ")"
  echo
  echo "exclude ("
  echo "	github.com/hashicorp/go-msgpack v1.1.5"
  echo "	github.com/hashicorp/go-msgpack v1.1.6"
  echo ")"
} > go.mod
printf 'package main\n\nimport _ "github.com/hashicorp/consul"\n' > tools.go

echo "build-consul: building consul v$version from its Go module (about 10 minutes on a fresh module cache)" >&2
go mod tidy >&2 2>/dev/null || true
# Fill go.sum for the exact dependency graph consul needs, then build.
go get "github.com/hashicorp/consul@v$version" >&2
go build -trimpath -ldflags "-s -w" -o "$bin.tmp" github.com/hashicorp/consul >&2
mv "$bin.tmp" "$bin"
echo "$bin"
