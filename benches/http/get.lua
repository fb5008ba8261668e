-- wrk script: plain GET of the URL given on the command line (floors, pings).
-- usage: wrk -t1 -c16 -d10s --latency -s benches/http/get.lua http://127.0.0.1:9333/static
-- WRK_CHECK=1 only checks for status 200 here.

-- shared tail (same in every script of this folder) -----------------------
local threads = {}
setup = function(thread) table.insert(threads, thread) end
CHECK_PATTERN = ''
if os.getenv("WRK_CHECK") == "1" then
  bad = 0
  response = function(status, headers, body)
    if status ~= 200 or not string.find(body, CHECK_PATTERN) then bad = bad + 1 end
  end
end
done = function(summary, latency, requests)
  local secs = summary.duration / 1e6
  local e = summary.errors
  local badsum = 0
  for _, t in ipairs(threads) do badsum = badsum + (tonumber(t:get("bad")) or 0) end
  io.write(string.format(
    "RESULT rps=%.1f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f requests=%d non2xx=%d sock_errors=%d bad_body=%d\n",
    summary.requests / secs, latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, summary.requests, e.status,
    e.connect + e.read + e.write + e.timeout, badsum))
end
