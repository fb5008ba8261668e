-- wrk script: GET /api/tools (optionally ?role=ROLE).
-- env: LIST_ROLE (default unset = all roles)  WRK_CHECK=1 checks "ok": true
-- usage: wrk -t1 -c16 -d10s --latency -s benches/http/list.lua http://127.0.0.1:PORT
local role = os.getenv("LIST_ROLE")
local path = role and ("/api/tools?role=" .. role) or "/api/tools"
wrk.method = "GET"
request = function()
  return wrk.format(nil, path)
end

-- what every script of this folder checks and prints: report.lua, beside this script
CHECK_PATTERN = '"ok"%s*:%s*true'
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "report.lua")
