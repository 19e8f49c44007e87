-- wrk script: every thread owns one connection (run with -t N -c N) and one lock name, and
-- loops acquire (POST .../leases) then release (DELETE .../leases/{id}) on it. A run stops
-- between the two as often as not, leaving its locks held for their TTL: each run names its
-- locks after its first argument (`wrk ... -s acquire_release.lua URL -- <run>`, the start time
-- by default), or a later run's connections would find them held and spin on refusals.
local threads = {}

function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  name = "bench-" .. (args[1] or tostring(os.time())) .. "-" .. id
  phase = "acquire"
  failures = 0
  cycles = 0
end

function request()
  if phase == "acquire" then
    return wrk.format("POST", "/v1/locks/" .. name .. "/leases",
      { ["Content-Type"] = "application/json" }, '{"ttl_ms":30000}')
  end
  return wrk.format("DELETE", "/v1/locks/" .. name .. "/leases/" .. lease,
    { ["Authorization"] = "Bearer " .. token })
end

function response(status, headers, body)
  if phase == "acquire" then
    if status == 201 then
      lease = body:match('"lease_id":"([^"]+)"')
      token = body:match('"token":"([^"]+)"')
      phase = "release"
    else
      failures = failures + 1
    end
  else
    if status == 200 then cycles = cycles + 1 else failures = failures + 1 end
    phase = "acquire"
  end
end

function done(summary, latency, requests)
  local c, f = 0, 0
  for _, t in ipairs(threads) do
    c = c + t:get("cycles")
    f = f + t:get("failures")
  end
  io.write(string.format("cycles=%d failures=%d cycles_per_s=%.0f\n", c, f,
    c / (summary.duration / 1e6)))
end
