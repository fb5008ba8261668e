-- The end every wrk script of this folder shares, loaded by each after it sets CHECK_PATTERN:
-- with WRK_CHECK=1 it counts the answers that are not 200 or lack CHECK_PATTERN ('' for any
-- body), and it prints one RESULT line that benches/http/run.sh reads.
local threads = {}
setup = function(thread) table.insert(threads, thread) end
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
