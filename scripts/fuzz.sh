#!/usr/bin/env bash
# Runs every fuzz target of every package in the root module, starting from its
# seed corpus in testdata/fuzz. Usage: scripts/fuzz.sh [execs]
#
# The budget is a count of executions (default 50000 per target), not a
# duration: a duration-based -fuzztime can fail with a bare "context deadline
# exceeded" at the boundary on Go releases before 1.27 (golang/go#75804, a race
# in the fuzz coordinator, no crasher written). A count has no deadline; the
# -timeout below still bounds each run in time.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
execs=${1:-50000}
execs=${execs%x}
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "== fuzz $pkg $target (${execs} execs)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "${execs}x" -timeout 5m "$pkg"
  done
done
