-- wrk script: fills the registry for the memory figure, then stops.
-- ROLES characters role0.. x TOOLS_PER_ROLE tools. DISTINCT=1 registers every (character, tool)
-- pair separately (ROLES x TOOLS_PER_ROLE requests, one definition each); otherwise
-- TOOLS_PER_ROLE role-null registrations, each shared by every character.
-- usage: wrk -t1 -c1 -d600s -s benches/http/fill.lua http://127.0.0.1:PORT
local roles = tonumber(os.getenv("ROLES") or "100")
local per_role = tonumber(os.getenv("TOOLS_PER_ROLE") or "1000")
local distinct = os.getenv("DISTINCT") == "1"
local callback = os.getenv("CALLBACK") or "http://127.0.0.1:9333"
local total = distinct and roles * per_role or per_role
local i = -1
local answered = 0
local failed = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

request = function()
  i = (i + 1) % total
  local k = i % per_role
  local role = distinct and string.format('"role%d"', math.floor(i / per_role)) or "null"
  local name = string.format("tool_%04d", k)
  local body = string.format(
    '{"name":"%s","description":"Benchmark tool %d: get the current weather for a city.",'
    .. '"parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name"},'
    .. '"unit":{"type":"string","enum":["c","f"]}},"required":["city"]},'
    .. '"callback_url":"%s/tools/%s","role":%s,"source":"plugin:bench","timeout_seconds":30}',
    name, k, callback, name, role)
  return wrk.format(nil, "/api/tools/register", nil, body)
end

response = function(status, headers, body)
  answered = answered + 1
  if status ~= 200 then failed = failed + 1 end
  if answered >= total then wrk.thread:stop() end
end

done = function(summary, latency, requests)
  io.write(string.format("FILL requests=%d non2xx=%d\n", summary.requests, summary.errors.status))
end
