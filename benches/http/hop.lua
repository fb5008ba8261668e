-- wrk script: POST HOP_PATH (default /hop) of the actor_hop bench server (benches/actor_hop.rs),
-- with a register request's body (the server only measures its length).
-- usage: HOP_PATH=/bare wrk -t1 -c16 -d10s --latency -s benches/http/hop.lua http://127.0.0.1:PORT
local path = os.getenv("HOP_PATH") or "/hop"
local body = '{"name":"tool_000","description":"Benchmark tool 0: get the current weather for a city.",'
  .. '"parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name"},'
  .. '"unit":{"type":"string","enum":["c","f"]}},"required":["city"]},'
  .. '"callback_url":"http://127.0.0.1:9333/tools/tool_000","role":null,"source":"plugin:bench","timeout_seconds":30}'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function() return wrk.format(nil, path, nil, body) end

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
