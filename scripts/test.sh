#!/usr/bin/env bash
# Runs every test of every module in this repository, with the race detector,
# after gofmt and go vet. This is the README's test command; CI calls it.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt wants to change:"; echo "$unformatted"; exit 1
fi

# The redisquota module's tests start a real redis-server on a loopback
# port: install it on a fresh machine (Debian's package; as root, or with
# sudo when there is one).
if ! command -v redis-server >/dev/null; then
  sudo=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then sudo=sudo; fi
  $sudo apt-get update -q && $sudo apt-get install -y -q --no-install-recommends redis-server
fi

# Every directory holding a go.mod is a module; test each one on its own.
modules=$(find . -name go.mod -not -path '*/testdata/*' -exec dirname {} \; | sort)
for m in $modules; do
  echo "== module $m"
  (cd "$m" && go vet ./... && go test -race -count=1 -timeout 10m ./...)
done
