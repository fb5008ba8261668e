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

-- what every script of this folder checks and prints: report.lua, beside this script
CHECK_PATTERN = '"ok"%s*:%s*true'
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "report.lua")
