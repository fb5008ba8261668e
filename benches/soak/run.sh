#!/usr/bin/env bash
# Soak run: minutes of steady load against the server as it is run (the `dist` profile), its RSS sampled from /proc.
# Not a test (not in `cargo test`): run by hand, e.g. `benches/soak/run.sh 300`, and copy the
# figures to docs/reliability.md. Arguments: DURATION_SECONDS (default 180), SAMPLE_SECONDS (5).
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${1:-180}
sample=${2:-5}

cargo build --profile dist --quiet --bin runtime-tools
dir=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

# The server: two workers, two characters, on a free port (it prints its address).
target/dist/runtime-tools serve --bind 127.0.0.1:0 --character Lanlan --character Mio \
    --workers 2 >"$dir/server.out" 2>"$dir/server.err" &
server=$!
pids+=("$server")
for _ in $(seq 100); do grep -q . "$dir/server.out" 2>/dev/null && break; sleep 0.1; done
addr=$(grep -oE '127\.0\.0\.1:[0-9]+' "$dir/server.out" | head -1)

# The load: a local callback and 8 client threads looping register / list / invoke /
# unregister, kept-alive connections, no pause.
python3 benches/soak/load.py "$addr" "$duration" >"$dir/load.out" &
load=$!
pids+=("$load")

echo "server pid $server on $addr; ${duration} s of load; RSS every ${sample} s"
echo "elapsed_s rss_kib threads requests"
start=$(date +%s)
while kill -0 "$load" 2>/dev/null; do
    now=$(( $(date +%s) - start ))
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$server/status")
    threads=$(awk '/^Threads:/ {print $2}' "/proc/$server/status")
    done_requests=$(tail -1 "$dir/load.out" 2>/dev/null || echo 0)
    echo "$now $rss $threads ${done_requests:-0}"
    sleep "$sample"
done
wait "$load"
echo "load finished: $(tail -1 "$dir/load.out") requests, errors: $(grep -c ERROR "$dir/load.out" || true)"
echo "final RSS $(awk '/^VmRSS:/ {print $2}' "/proc/$server/status") KiB, peak $(awk '/^VmHWM:/ {print $2}' "/proc/$server/status") KiB"
