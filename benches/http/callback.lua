-- wrk script: the raw floor of one tool dispatch. POSTs the exact body a server
-- sends to a tool's callback_url straight to the callback server (nginx on :9333).
-- env: TOOL (default tool_000)
-- usage: wrk -t1 -c16 -d10s --latency -s benches/http/callback.lua http://127.0.0.1:9333
local tool = os.getenv("TOOL") or "tool_000"
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  i = i + 1
  local body = string.format(
    '{"name":"%s","arguments":{"city":"Tokyo","unit":"c"},"call_id":"call_%d","raw_arguments":"{\\"city\\": \\"Tokyo\\", \\"unit\\": \\"c\\"}"}',
    tool, i)
  return wrk.format(nil, "/tools/" .. tool, nil, body)
end

-- what every script of this folder checks and prints: report.lua, beside this script
CHECK_PATTERN = '"is_error"%s*:%s*false'
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "report.lua")
