#!/usr/bin/env bash
# Churn soak: the churn tests of `cargo test` (tests/api/churn/), each kind driven for CYCLES
# cycles (default 2000) instead of a few hundred, after WARM_UP cycles (default 1500: past the
# plateau the server's memory climbs to before it stays flat) instead of about ten, one kind at
# a time, against the release server running as a child process. Not a test (not in
# `cargo test`): run by hand, e.g. `benches/churn/run.sh 4000 1500`, and copy the table to
# docs/reliability.md ("Churn"). Each kind must hold the same bounds as in `cargo test` (a kind
# that does not fails its test here too).
# Prints one row per kind: the cycles, and the server's descriptors, TCP sockets by state,
# threads and RSS after the warm-up and after the cycles, once settled.
set -euo pipefail
cd "$(dirname "$0")/../.."
cycles=${1:-2000}
warm_up=${2:-1500}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
echo "cycles per kind: $cycles, after a warm-up of $warm_up"
status=0
CHURN_CYCLES=$cycles CHURN_WARM_UP=$warm_up cargo test --release --test api churn:: -- --nocapture --test-threads 1 \
    >"$out" 2>&1 || status=$?
echo
echo "| kind | cycles | warm: fds, tcp, threads, RSS | after: fds, tcp, threads, RSS | settled in |"
echo "| --- | --- | --- | --- | --- |"
# With one test at a time, a test's output follows its `test NAME ... ` on the same line.
sed -nE 's/^(test .* \.\.\. )?churn (.*): ([0-9]+) cycles; warm: (.*); after: (.*) \(settled in (.*)\)$/| \2 | \3 | \4 | \5 | \6 |/p' "$out"
echo
grep -E -A1 '^test result:|panicked' "$out" || true
exit "$status"
