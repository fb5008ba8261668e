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

-- what every script of this folder checks and prints: report.lua, beside this script
CHECK_PATTERN = '"is_error"%s*:%s*false'
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "report.lua")
