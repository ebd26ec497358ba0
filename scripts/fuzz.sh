#!/usr/bin/env bash
# Runs every fuzz target of the root module for a short time each (default
# 5s), starting from its seed corpus in testdata/fuzz. Usage: scripts/fuzz.sh [duration]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
fuzztime=${1:-5s}
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "== fuzz $pkg $target ($fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
  done
done
