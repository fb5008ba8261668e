-- wrk script: GET /api/tools (optionally ?role=ROLE).
-- env: LIST_ROLE (default unset = all roles)  WRK_CHECK=1 checks "ok": true
-- usage: wrk -t1 -c16 -d10s --latency -s benches/http/list.lua http://127.0.0.1:PORT
local role = os.getenv("LIST_ROLE")
local path = role and ("/api/tools?role=" .. role) or "/api/tools"
wrk.method = "GET"
request = function()
  return wrk.format(nil, path)
end

-- shared tail (same in every script of this folder) -----------------------
local threads = {}
setup = function(thread) table.insert(threads, thread) end
CHECK_PATTERN = '"ok"%s*:%s*true'
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
