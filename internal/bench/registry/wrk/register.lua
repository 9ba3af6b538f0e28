-- wrk -s register.lua: single-instance registers with fresh ids, the body of
-- sextant bench registry's register scenario (16 metadata entries).
local meta = {}
for j = 1, 16 do
  meta[#meta + 1] = string.format('"meta-key%02d":"v%02d-000000"', j, j)
end
local fmt = '{"instances":[{"id":"wrk-t%d-%010d","namespace":"%s","service":"reg-%d",' ..
  '"host":"10.0.0.1","port":8080,"protocol":"http","version":"v1","weight":100,"metadata":{' ..
  table.concat(meta, ",") .. '}}]}'
local ns = os.getenv("WRK_NS") or "wrk"
local nthreads = 0
function setup(thread)
  thread:set("tid", nthreads)
  nthreads = nthreads + 1
end
local n = 0
local headers = {["Content-Type"] = "application/json"}
request = function()
  n = n + 1
  return wrk.format("POST", "/v1/instances", headers, string.format(fmt, tid, n, ns, n % 64))
end
response = function(status, headers, body)
  if status ~= 200 then
    io.stderr:write("status " .. status .. ": " .. body .. "\n")
  end
end
