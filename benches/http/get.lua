-- wrk script: plain GET of the URL given on the command line (floors, pings).
-- usage: wrk -t1 -c16 -d10s --latency -s benches/http/get.lua http://127.0.0.1:9333/static
-- WRK_CHECK=1 only checks for status 200 here.

-- what every script of this folder checks and prints: report.lua, beside this script
CHECK_PATTERN = ''
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "report.lua")
