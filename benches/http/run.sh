#!/usr/bin/env bash
# HTTP load harness: the server (its `dist` build, as it is run) under wrk, against an nginx
# callback server, with the floor (wrk straight at nginx) measured in the same run. Needs wrk,
# nginx and curl (Debian: apt-get install -y wrk nginx curl). Figures and method: docs/benchmarks.md.
#
# usage (from anywhere):  benches/http/run.sh [SUITE ...]
#   floor      wrk -> nginx callback (POST, one loopback HTTP exchange) and GET /static
#   register   POST /api/tools/register, role null, over 1, 8 and 64 characters
#   invoke     POST /api/tools/invoke to the nginx callback, at CONNS and at 1 connection
#   list       GET /api/tools with 8 and 64 characters x LIST_TOOLS tools
#   workers1   register (1 character), invoke and list (8 characters) with --workers 1
#   memory     RSS after 100 000 (character, tool) pairs: 100 x 1000 and 1000 x 100, each shared
#              (role-null registrations) and distinct (one registration per pair)
#   proxy      wrk -> nginx as a reverse proxy (nginx-proxy.conf, 2 workers) -> nginx callback:
#              two HTTP exchanges per request and no JSON work, the floor of the invoke route's
#              shape (its ratio is to floor-callback, like invoke's). Not in the default list.
#   callpath   the model's call end to end (benches/call_path.rs): 1, 8 and 64 characters, each
#              with a live session to a fake model calling the tool in a closed loop, in client
#              and relay mode, answered by the nginx callback; with its floor (wrk at nginx, 1
#              connection). Not in the default list: run it by name.
#   callpath-export
#              what span export costs on the call path (benches/call_path.rs, client mode, one
#              session): per run, alternated, main's binary (MAIN_BIN=PATH), this build with export
#              off, and this build exporting every span to nginx's /v1/traces (OTLP/HTTP); with the
#              floor. Not in the default list: run it by name.
#   chat       text chat (benches/chat.rs), chat completions and the Responses API: a request with
#              one round of a registered tool through the server against the app's own loop
#              (upstream, callback, upstream), at CONNS and at 1 connection, and the first streamed
#              token through the server against straight from the upstream; with the floor of one
#              exchange (wrk at nginx, 1 connection) and the floor of the stack (a plain forwarder:
#              actix-web and awc doing the same exchanges with no JSON work). With MAIN_BIN=PATH (another build's binary,
#              e.g. main's) every server scenario also runs on that binary, and the summary gives
#              both builds' figures beside the same floor. At 1 connection the scenarios run in
#              turn within slices of each run; the exchange is measured before and after the
#              suite. Not in the default list: run it by name.
#   hop        what one actor round trip from a handler costs (benches/actor_hop.rs: a server with
#              a route that answers at once and one that first asks an actor), with the actor on
#              the system thread (as the router) or on the first HTTP worker, at 2 and 1 workers.
#              Not in the default list: run it by name.
#   state      register at CONNS connections, 1 character, without and with --state (every change
#              durable before its answer), one run of each in turn, RUNS times, each on a fresh
#              server (and a fresh state file). Not in the default list: run it by name.
#   (default: all of them, the floor first)
# The server logs at its default level (info) to a file unless RUST_LOG says otherwise.
# env: RUNS=3 DURATION=10s CONNS=16 WARMUP=2s WRK_CHECK=1 LIST_TOOLS=26 PORT=48999
#      GRID="1 8 64" (characters of the register and callpath suites)  SKIP_BUILD=1 (use the built
#      binary)  MODES="client relay" (session modes of the callpath suite)
#      HOP_WORKERS="2 1" HOP_ACTOR="system worker" (the layouts of the hop suite)
#      CHAT_ONLY=round|ttft (the chat suite's one-round requests only, or its first token only)
#      RUNTIME_TOOLS_BIN=PATH (measure that server binary instead, e.g. an older build to compare)
# Every run prints `SCENARIO runN rps=… p50_ms=… p99_ms=… … cpu_us_per_req=…`; the summary at
# the end gives each scenario's median and its ratio to the median floor of this invocation.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"

RUNS="${RUNS:-3}"; DURATION="${DURATION:-10s}"; CONNS="${CONNS:-16}"; WARMUP="${WARMUP:-2s}"
LIST_TOOLS="${LIST_TOOLS:-26}"; PORT="${PORT:-48999}"; GRID="${GRID:-1 8 64}"
MODES="${MODES:-client relay}"
export WRK_CHECK="${WRK_CHECK:-1}"
export CALLBACK="http://127.0.0.1:9333"
BASE="http://127.0.0.1:$PORT"
SUITES=("$@"); [ ${#SUITES[@]} -gt 0 ] || SUITES=(floor register invoke list workers1 memory)

WORK="$(mktemp -d "${TMPDIR:-/tmp}/runtime-tools-bench.XXXXXX")"
RESULTS="$WORK/results"; : >"$RESULTS"
SERVER_PID=""

# The server as it is run: the `dist` profile (Cargo.toml); the harnesses that start it as a
# child process (cargo bench) get it through RUNTIME_TOOLS_BIN.
if [ -z "${SKIP_BUILD:-}" ]; then cargo build --profile dist --quiet --bin runtime-tools; fi
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps | sed 's/.*"target_directory":"\([^"]*\)".*/\1/')"
BIN="${RUNTIME_TOOLS_BIN:-$TARGET_DIR/dist/runtime-tools}"
export RUNTIME_TOOLS_BIN="$BIN"

nginx_start() { nginx -p "$WORK/" -c "$HERE/nginx-callback.conf" -e "$WORK/error.log"; }
nginx_stop() { [ -s "$WORK/nginx.pid" ] && nginx -p "$WORK/" -c "$HERE/nginx-callback.conf" -e "$WORK/error.log" -s quit || true; }
nginx_pids() { local m; m=$(cat "$WORK/${1:-nginx}.pid"); echo "$m $(pgrep -P "$m" | tr '\n' ' ')"; }
proxy_nginx() { nginx -p "$WORK/" -c "$HERE/nginx-proxy.conf" -e "$WORK/error-proxy.log" "$@"; }

server_start() {  # server_start CHARACTERS [WORKERS]
  local args=(serve --bind "127.0.0.1:$PORT") k
  for k in $(seq 0 $(($1 - 1))); do args+=(--character "role$k"); done
  if [ -n "${2:-}" ]; then args+=(--workers "$2"); fi
  if [ -n "${STATE_FILE:-}" ]; then args+=(--state "$STATE_FILE"); fi
  serve "$BIN" "${args[@]}"
}
serve() {  # serve PROGRAM ARGS...: starts it as SERVER_PID, waits for its "listening on" line
  "$@" >"$WORK/server.out" 2>"$WORK/server.err" &
  SERVER_PID=$!
  local deadline=$((SECONDS + 30))
  until grep -q '^listening on' "$WORK/server.out" 2>/dev/null; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null || [ $SECONDS -gt $deadline ]; then
      echo "$(basename "$1") did not start:" >&2; cat "$WORK/server.err" >&2; exit 1
    fi
    sleep 0.1
  done
}
server_stop() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  SERVER_PID=""
}
proxy_stop() { [ -s "$WORK/nginx-proxy.pid" ] && proxy_nginx -s quit || true; }
cleanup() { server_stop; proxy_stop; nginx_stop; rm -rf "$WORK"; }
trap cleanup EXIT

post() {  # post PATH JSON -> prints body, fails on non-2xx
  curl -sS --fail-with-body -X POST -H 'content-type: application/json' -d "$2" "$BASE$1"
}
tool_body() {  # tool_body NAME
  printf '{"name":"%s","description":"Benchmark tool: get the current weather for a city.","parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]},"callback_url":"%s/tools/%s","role":null,"source":"plugin:bench","timeout_seconds":30}' "$1" "$CALLBACK" "$1"
}
cpu_ticks() {  # utime+stime (clock ticks) of the processes named in $1, all threads
  local total=0 p f
  for p in $1; do
    f=$(sed 's/.*) //' "/proc/$p/stat"); set -- $f
    total=$((total + ${12} + ${13}))
  done
  echo "$total"
}
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# measure LABEL SCRIPT URL PIDS [CONNS]: warm-up, then RUNS wrk runs; one line per run.
measure() {
  local label=$1 script=$2 url=$3 pids=$4 conns=${5:-$CONNS} hz r t0 t1 line reqs
  hz=$(getconf CLK_TCK)
  [ "$WARMUP" = 0 ] || wrk -t1 -c"$conns" -d"$WARMUP" -s "$script" "$url" >/dev/null
  for r in $(seq 1 "$RUNS"); do
    t0=$(cpu_ticks "$pids")
    line=$(wrk -t1 -c"$conns" -d"$DURATION" --latency -s "$script" "$url" | grep '^RESULT')
    t1=$(cpu_ticks "$pids")
    reqs=$(printf '%s' "$line" | sed 's/.* requests=\([0-9]*\).*/\1/')
    line="$label run$r ${line#RESULT } cpu_us_per_req=$(awk -v d=$((t1 - t0)) -v h="$hz" -v n="$reqs" 'BEGIN{printf "%.1f", (n>0)?d*1e6/h/n:0}')"
    echo "$line" | tee -a "$RESULTS"
  done
}

floor() {
  measure floor-callback "$HERE/callback.lua" "$CALLBACK" "$(nginx_pids)"
  measure floor-static "$HERE/get.lua" "$CALLBACK/static" "$(nginx_pids)"
}

register_suite() {  # register_suite CHARACTERS [WORKERS]
  server_start "$1" "${2:-}"
  echo "# register probe: $(post /api/tools/register "$(tool_body tool_probe)")"
  post /api/tools/unregister '{"name":"tool_probe","role":null}' >/dev/null
  measure "register-c$1${2:+-w$2}" "$HERE/register.lua" "$BASE" "$SERVER_PID"
  server_stop
}

state_suite() {  # alternated: a run without the store, a run with it, RUNS times
  local r runs=$RUNS
  RUNS=1
  for r in $(seq 1 "$runs"); do
    server_start 1
    measure register-nostate "$HERE/register.lua" "$BASE" "$SERVER_PID"
    server_stop
    rm -f "$WORK/state.redb"
    STATE_FILE="$WORK/state.redb" server_start 1
    measure register-state "$HERE/register.lua" "$BASE" "$SERVER_PID"
    server_stop
  done
  RUNS=$runs
}

invoke_suite() {  # invoke_suite [WORKERS]
  server_start 1 "${1:-}"
  post /api/tools/register "$(tool_body tool_000)" >/dev/null
  echo "# invoke sample: $(post /api/tools/invoke '{"name":"tool_000","arguments":{"city":"Tokyo","unit":"c"},"role":"role0","call_id":"probe"}')"
  ROLE=role0 measure "invoke${1:+-w$1}" "$HERE/invoke.lua" "$BASE" "$SERVER_PID"
  if [ -z "${1:-}" ]; then
    measure floor-callback-conn1 "$HERE/callback.lua" "$CALLBACK" "$(nginx_pids)" 1
    ROLE=role0 measure invoke-conn1 "$HERE/invoke.lua" "$BASE" "$SERVER_PID" 1
  fi
  server_stop
}

list_suite() {  # list_suite CHARACTERS [WORKERS]
  local k body
  server_start "$1" "${2:-}"
  for k in $(seq 0 $((LIST_TOOLS - 1))); do
    post /api/tools/register "$(tool_body "$(printf 'tool_%03d' "$k")")" >/dev/null
  done
  body=$(curl -sS "$BASE/api/tools")
  echo "# list: $(printf '%s' "$body" | wc -c) bytes, $(printf '%s' "$body" | grep -o '"is_remote"' | wc -l) tool entries"
  measure "list-c$1${2:+-w$2}" "$HERE/list.lua" "$BASE" "$SERVER_PID"
  server_stop
}

memory_suite() {
  local roles per distinct before line
  for grid in "100 1000" "1000 100"; do
    set -- $grid; roles=$1; per=$2
    for distinct in 0 1; do
      server_start "$roles"
      before=$(rss_kib "$SERVER_PID")
      line=$(ROLES=$roles TOOLS_PER_ROLE=$per DISTINCT=$distinct \
        wrk -t1 -c1 -d600s -s "$HERE/fill.lua" "$BASE" | grep '^FILL')
      local pairs
      pairs=$(curl -sS "$BASE/api/tools" | grep -o '"is_remote"' | wc -l)
      echo "memory-${roles}x${per}-$([ "$distinct" = 1 ] && echo distinct || echo shared) ${line#FILL } pairs=$pairs rss_before_mib=$((before / 1024)) rss_after_mib=$(($(rss_kib "$SERVER_PID") / 1024))" | tee -a "$RESULTS"
      server_stop
    done
  done
}

proxy_suite() {
  proxy_nginx
  local deadline=$((SECONDS + 10))
  until curl -sS -o /dev/null -X POST -H 'content-type: application/json' -d '{}' \
    http://127.0.0.1:9334/api/tools/invoke 2>/dev/null; do
    [ $SECONDS -le $deadline ] || { echo "nginx proxy did not start" >&2; exit 1; }
    sleep 0.1
  done
  echo "# proxy sample: $(curl -sS -X POST -H 'content-type: application/json' -d '{"name":"tool_000"}' http://127.0.0.1:9334/api/tools/invoke)"
  measure proxy "$HERE/invoke.lua" http://127.0.0.1:9334 "$(nginx_pids nginx-proxy)"
  proxy_stop
}

chat_suite() {
  measure floor-callback-conn1 "$HERE/callback.lua" "$CALLBACK" "$(nginx_pids)" 1
  [ -n "${SKIP_BUILD:-}" ] || cargo bench --quiet --bench chat --no-run 2>/dev/null
  cargo bench --quiet --bench chat -- --conns "$CONNS" --runs "$RUNS" --seconds "${DURATION%s}" \
    --warmup-seconds "${WARMUP%s}" --callback "$CALLBACK" ${CHAT_ONLY:+--only "$CHAT_ONLY"} \
    2>"$WORK/chat.err" | tee -a "$RESULTS" | grep -v '^#' || { cat "$WORK/chat.err" >&2; exit 1; }
  # The exchange again: the unit is the median of both, from either end of the suite's minutes.
  measure floor-callback-conn1 "$HERE/callback.lua" "$CALLBACK" "$(nginx_pids)" 1
}

hop_suite() {
  local exe w on
  exe=$(cargo bench --quiet --bench actor_hop --no-run --message-format=json 2>/dev/null \
    | grep '"name":"actor_hop"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
  [ -x "$exe" ] || { echo "actor_hop bench did not build" >&2; exit 1; }
  for w in ${HOP_WORKERS:-2 1}; do
    for on in ${HOP_ACTOR:-system worker}; do
      serve "$exe" --port "$PORT" --workers "$w" --actor-on "$on"
      HOP_PATH=/bare measure "hop-bare-w$w-$on" "$HERE/hop.lua" "$BASE" "$SERVER_PID"
      HOP_PATH=/hop measure "hop-actor-w$w-$on" "$HERE/hop.lua" "$BASE" "$SERVER_PID"
      server_stop
    done
  done
}

callpath_export_suite() {
  [ -n "${MAIN_BIN:-}" ] || { echo "callpath-export needs MAIN_BIN=PATH (main's server binary)" >&2; exit 2; }
  measure floor-callback-conn1 "$HERE/callback.lua" "$CALLBACK" "$(nginx_pids)" 1
  [ -n "${SKIP_BUILD:-}" ] || cargo bench --quiet --bench call_path --no-run 2>/dev/null
  local run variant bin endpoint
  for run in $(seq "$RUNS"); do
    for variant in main off on; do
      bin="$BIN"; endpoint=""
      [ "$variant" = main ] && bin="$MAIN_BIN"
      [ "$variant" = on ] && endpoint="$CALLBACK"
      RUNTIME_TOOLS_BIN="$bin" OTEL_EXPORTER_OTLP_ENDPOINT="$endpoint" OTEL_BSP_SCHEDULE_DELAY=1000 \
        cargo bench --quiet --bench call_path -- --mode client --sessions 1 --runs 1 \
        --seconds "${DURATION%s}" --warmup-seconds "${WARMUP%s}" --callback "$CALLBACK" \
        --label "$variant" 2>"$WORK/call_path.err" | tee -a "$RESULTS" | grep -v '^#' \
        || { cat "$WORK/call_path.err" >&2; exit 1; }
    done
  done
}

callpath_suite() {
  local mode n line
  measure floor-callback-conn1 "$HERE/callback.lua" "$CALLBACK" "$(nginx_pids)" 1
  [ -n "${SKIP_BUILD:-}" ] || cargo bench --quiet --bench call_path --no-run 2>/dev/null
  for mode in $MODES; do
    for n in $GRID; do
      # Warm-up and runs as the wrk scenarios; each run starts a fresh server.
      cargo bench --quiet --bench call_path -- --mode "$mode" --sessions "$n" --runs "$RUNS" \
        --seconds "${DURATION%s}" --warmup-seconds "${WARMUP%s}" --callback "$CALLBACK" \
        2>"$WORK/call_path.err" | tee -a "$RESULTS" | grep -v '^#' || { cat "$WORK/call_path.err" >&2; exit 1; }
    done
  done
}

echo "# machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'), kernel $(uname -r)"
echo "# RUNS=$RUNS DURATION=$DURATION CONNS=$CONNS WRK_CHECK=$WRK_CHECK LIST_TOOLS=$LIST_TOOLS"
nginx_start
for suite in "${SUITES[@]}"; do
  case "$suite" in
    floor) floor ;;
    register) for n in $GRID; do register_suite "$n"; done ;;
    invoke) invoke_suite ;;
    list) list_suite 8; list_suite 64 ;;
    workers1) register_suite 1 1; invoke_suite 1; list_suite 8 1 ;;
    memory) memory_suite ;;
    proxy) proxy_suite ;;
    callpath) callpath_suite ;;
    callpath-export) callpath_export_suite ;;
    chat) chat_suite ;;
    hop) hop_suite ;;
    state) state_suite ;;
    *) echo "unknown suite $suite" >&2; exit 2 ;;
  esac
done

# Medians per scenario; ratios against this invocation's median floor (same run).
echo
echo "# summary: medians over runs (errors: the worst run); ratio = rps / floor-callback rps (floor-callback-conn1 for *-conn1)"
awk '
  /^floor|^register|^invoke|^list|^proxy|^hop/ && / run[0-9]+ / {
    s=$1; n[s]++
    for (i=3; i<=NF; i++) { split($i, kv, "="); v[s, kv[1], n[s]] = kv[2] }
    if (!(s in seen)) { seen[s]=1; order[++m]=s }
  }
  function med(s, k,   i, j, t, a, c) {
    c = n[s]; for (i=1; i<=c; i++) a[i] = v[s, k, i] + 0
    for (i=1; i<=c; i++) for (j=i+1; j<=c; j++) if (a[j] < a[i]) { t=a[i]; a[i]=a[j]; a[j]=t }
    return (c % 2) ? a[(c+1)/2] : (a[c/2] + a[c/2+1]) / 2
  }
  # Errors are counted at their worst run, not their median: one bad run must show.
  function mx(s, k,   i, m) {
    m = 0; for (i=1; i<=n[s]; i++) if (v[s, k, i] + 0 > m) m = v[s, k, i] + 0
    return m
  }
  END {
    fl = ("floor-callback" in seen) ? med("floor-callback", "rps") : 0
    fl1 = ("floor-callback-conn1" in seen) ? med("floor-callback-conn1", "rps") : 0
    printf "%-24s %10s %8s %8s %8s %12s %10s %8s\n", "scenario", "rps", "ratio", "p50_ms", "p99_ms", "cpu_us/req", "max_errors", "max_bad"
    for (k=1; k<=m; k++) {
      s = order[k]; f = (s ~ /conn1$/) ? fl1 : fl
      printf "%-24s %10.0f %7.1f%% %8.3f %8.3f %12.1f %10d %8d\n", s, med(s, "rps"),
        (f > 0) ? 100 * med(s, "rps") / f : 0, med(s, "p50_ms"), med(s, "p99_ms"),
        med(s, "cpu_us_per_req"), mx(s, "non2xx") + mx(s, "sock_errors"), mx(s, "bad_body")
    }
  }' "$RESULTS"
grep '^memory' "$RESULTS" || true

# The call path: medians over runs (faults: the worst run); overhead = p50 - the floor's p50 at
# one connection, meaningful for the one-session rows (one call in flight).
if grep -q '^callpath' "$RESULTS"; then
  echo
  awk '
    / run[0-9]+ / {
      s=$1; n[s]++
      for (i=3; i<=NF; i++) { split($i, kv, "="); v[s, kv[1], n[s]] = kv[2] }
      if (s ~ /^callpath/ && !(s in seen)) { seen[s]=1; order[++m]=s }
    }
    function med(s, k,   i, j, t, a, c) {
      c = n[s]; for (i=1; i<=c; i++) a[i] = v[s, k, i] + 0
      for (i=1; i<=c; i++) for (j=i+1; j<=c; j++) if (a[j] < a[i]) { t=a[i]; a[i]=a[j]; a[j]=t }
      return (c % 2) ? a[(c+1)/2] : (a[c/2] + a[c/2+1]) / 2
    }
    # The median over runs of the p50 of scenario a less that of its floor b in the same run
    # (at one connection both ran in the same slices of each run: each difference is paired).
    function dmed(a, b,   i, j, t, d, c) {
      c = (n[a] < n[b]) ? n[a] : n[b]
      for (i=1; i<=c; i++) d[i] = v[a, "p50_ms", i] - v[b, "p50_ms", i]
      for (i=1; i<=c; i++) for (j=i+1; j<=c; j++) if (d[j] < d[i]) { t=d[i]; d[i]=d[j]; d[j]=t }
      return (c % 2) ? d[(c+1)/2] : (d[c/2] + d[c/2+1]) / 2
    }
    function mx(s, k,   i, r) {
      r = 0; for (i=1; i<=n[s]; i++) if (v[s, k, i] + 0 > r) r = v[s, k, i] + 0
      return r
    }
    END {
      f = ("floor-callback-conn1" in n) ? med("floor-callback-conn1", "p50_ms") : 0
      printf "# call path: floor p50 %.3f ms (wrk -> nginx, 1 connection)\n", f
      printf "%-24s %10s %8s %8s %12s %12s %6s %6s %6s\n", "scenario", "calls/s", "p50_ms", "p99_ms", "overhead_ms", "cpu_us/call", "lost", "twice", "bad"
      for (k=1; k<=m; k++) {
        s = order[k]
        printf "%-24s %10.0f %8.3f %8.3f %12.3f %12.1f %6d %6d %6d\n", s, med(s, "rps"), med(s, "p50_ms"),
          med(s, "p99_ms"), med(s, "p50_ms") - f, med(s, "cpu_us_per_call"), mx(s, "lost"), mx(s, "twice"), mx(s, "bad")
      }
    }' "$RESULTS"
fi

# Text chat: medians over runs (faults: the worst run). The targets are in units of one loopback
# exchange (wrk at nginx, 1 connection, p50): a one-round request through the server at most the
# app's own loop plus 2 exchanges (p50, one connection), the first streamed token at most 1.5
# exchanges later than straight from the upstream.
if grep -q '^chat-\|^ttft-\|^responses-' "$RESULTS"; then
  echo
  awk '
    / run[0-9]+ / {
      s=$1; n[s]++
      for (i=3; i<=NF; i++) { split($i, kv, "="); v[s, kv[1], n[s]] = kv[2] }
      if ((s ~ /^chat-/ || s ~ /^ttft-/ || s ~ /^responses-/) && !(s in seen)) { seen[s]=1; order[++m]=s }
    }
    function med(s, k,   i, j, t, a, c) {
      c = n[s]; for (i=1; i<=c; i++) a[i] = v[s, k, i] + 0
      for (i=1; i<=c; i++) for (j=i+1; j<=c; j++) if (a[j] < a[i]) { t=a[i]; a[i]=a[j]; a[j]=t }
      return (c % 2) ? a[(c+1)/2] : (a[c/2] + a[c/2+1]) / 2
    }
    # The median over runs of the p50 of scenario a less that of its floor b in the same run
    # (at one connection both ran in the same slices of each run: each difference is paired).
    function dmed(a, b,   i, j, t, d, c) {
      c = (n[a] < n[b]) ? n[a] : n[b]
      for (i=1; i<=c; i++) d[i] = v[a, "p50_ms", i] - v[b, "p50_ms", i]
      for (i=1; i<=c; i++) for (j=i+1; j<=c; j++) if (d[j] < d[i]) { t=d[i]; d[i]=d[j]; d[j]=t }
      return (c % 2) ? d[(c+1)/2] : (d[c/2] + d[c/2+1]) / 2
    }
    function mx(s, k,   i, r) {
      r = 0; for (i=1; i<=n[s]; i++) if (v[s, k, i] + 0 > r) r = v[s, k, i] + 0
      return r
    }
    END {
      x = ("floor-callback-conn1" in n) ? med("floor-callback-conn1", "p50_ms") : 0
      printf "# chat: one exchange (wrk -> nginx, 1 connection, before and after the suite) p50 %.3f ms\n", x
      printf "%-20s %10s %8s %8s %12s %14s %6s\n", "scenario", "rps", "p50_ms", "p99_ms", "cpu_us/req", "cpu_us/round", "faults"
      for (k=1; k<=m; k++) {
        s = order[k]
        printf "%-20s %10.0f %8.3f %8.3f %12.1f %14.1f %6d\n", s, med(s, "rps"), med(s, "p50_ms"),
          med(s, "p99_ms"), med(s, "cpu_us_per_req"), med(s, "cpu_us_per_round"), mx(s, "faults")
      }
      # Each wire format against its own floor: chat completions, then the Responses API; the
      # plain forwarder (actix-web and awc doing the same exchanges with no JSON work), this
      # build ("server") and, when MAIN_BIN was given, the other ("main").
      split("chat responses", formats, " "); split("|responses-", ttft, "|"); split("forwarder main server", builds, " ")
      for (f=1; f<=2; f++) for (b=1; b<=3; b++) {
        p = formats[f]; t = ttft[f]; s = builds[b]
        w = (s == "main") ? "MAIN_BIN" : (s == "server") ? "this build" : "a plain forwarder (the floor of the stack)"
        c1 = "-conn1"
        if (((p "-" s) in n) && ((p "-floor") in n))
          printf "# %s, %s: requests/s through the server: %.1f%% of the app'"'"'s own loop\n", p, w, 100 * med(p "-" s, "rps") / med(p "-floor", "rps")
        if (((p "-" s c1) in n) && ((p "-floor" c1) in n) && x > 0) {
          d = dmed(p "-" s c1, p "-floor" c1)
          printf "# %s, %s: a one-round request adds %.3f ms = %.2f exchanges over the app'"'"'s own loop (target: at most 2; p50 at 1 connection)\n", p, w, d, d / x
        }
        if (((t "ttft-" s) in n) && ((t "ttft-direct") in n) && x > 0) {
          d = dmed(t "ttft-" s, t "ttft-direct")
          printf "# %s, %s: the first streamed token comes %.3f ms = %.2f exchanges later through the server (target: at most 1.5)\n", p, w, d, d / x
        }
      }
    }' "$RESULTS"
fi
