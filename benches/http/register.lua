-- wrk script: POST /api/tools/register, cycling over TOOLS names (tool_000 ..),
-- so after the first lap every request replaces an existing tool.
-- env: TOOLS (default 100)  CALLBACK (default http://127.0.0.1:9333)
--      REGISTER_ROLE (default unset = JSON null = global, i.e. fan-out to every role)
--      WRK_CHECK=1 also counts responses that are not 200 with "ok": true
-- usage: wrk -t1 -c16 -d10s --latency -s benches/http/register.lua http://127.0.0.1:PORT
local n_tools = tonumber(os.getenv("TOOLS") or "100")
local callback = os.getenv("CALLBACK") or "http://127.0.0.1:9333"
local role = os.getenv("REGISTER_ROLE")
local role_json = role and ('"' .. role .. '"') or "null"

local bodies = {}
for k = 0, n_tools - 1 do
  local name = string.format("tool_%03d", k)
  bodies[k + 1] = string.format(
    '{"name":"%s","description":"Benchmark tool %d: get the current weather for a city.",'
    .. '"parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name"},'
    .. '"unit":{"type":"string","enum":["c","f"]}},"required":["city"]},'
    .. '"callback_url":"%s/tools/%s","role":%s,"source":"plugin:bench","timeout_seconds":30}',
    name, k, callback, name, role_json)
end

local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

request = function()
  i = i + 1
  return wrk.format(nil, "/api/tools/register", nil, bodies[(i % n_tools) + 1])
end

-- what every script of this folder checks and prints: report.lua, beside this script
CHECK_PATTERN = '"ok"%s*:%s*true'
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "report.lua")
