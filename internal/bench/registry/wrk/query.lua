-- wrk -s query.lua: the query scenario's GET (2-term selector); WRK_GZIP=1 asks for gzip.
local ns = os.getenv("WRK_NS") or "wrk"
local path = "/v1/namespaces/" .. ns .. "/services/query/instances?selector=meta-key01%3Dv01-000001%2Cmeta-key02%21%3Dx"
local headers = {}
if os.getenv("WRK_GZIP") == "1" then headers["Accept-Encoding"] = "gzip" end
local req
init = function(args) req = wrk.format("GET", path, headers) end
request = function() return req end
response = function(status, headers, body)
  if status ~= 200 then io.stderr:write("status " .. status .. "\n") end
end
