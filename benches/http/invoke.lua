-- wrk script: POST /api/tools/invoke for a registered remote tool; the server
-- POSTs {"name","arguments","call_id","raw_arguments"} to the tool's callback_url.
-- env: TOOL (default tool_000)  ROLE (default role0)
--      WRK_CHECK=1 checks "ok": true and "is_error": false
-- usage: wrk -t1 -c16 -d10s --latency -s benches/http/invoke.lua http://127.0.0.1:PORT
local tool = os.getenv("TOOL") or "tool_000"
local role = os.getenv("ROLE") or "role0"
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  i = i + 1
  local body = string.format(
    '{"name":"%s","arguments":{"city":"Tokyo","unit":"c"},"role":"%s","call_id":"call_%d"}',
    tool, role, i)
  return wrk.format(nil, "/api/tools/invoke", nil, body)
end

-- shared tail (same in every script of this folder) -----------------------
local threads = {}
setup = function(thread) table.insert(threads, thread) end
CHECK_PATTERN = '"is_error"%s*:%s*false'
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
