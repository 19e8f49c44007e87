-- Heartbeat for a semaphore lease: every one of its permits expires later. KEYS,
-- ARGV[1..2]: see prelude.lua. Then:
-- A(1) lease_id: lease id
-- A(2) proven: "1" when the presented token proves the lease id
-- A(3) ttl_ms: new ttl (ms); "0" keeps the lease's own TTL
-- Returns: JSON with status = renewed | lease_lost | forbidden | unknown_lease | too_late
if not semaphore_begin(KEYS, ARGV) then return TOO_LATE end
local id, proven, ttl = A(1), A(2) == '1', A(3)
local rec, st = load(id, false, true)
if not proven then
  if rec or find_ended(id) then return '{"status":"forbidden"}' end
  return '{"status":"unknown_lease"}'
end
local events = {}
local ok, refusal = check_permits(id, rec, st.hexp, events)
if not ok then return string.sub(refusal, 1, -2) .. ev(events) .. '}' end
if ttl == '0' then ttl = rec.ttl end
local revocation
ttl, revocation = ttl_within_revocation(id, ttl)
local expiry = d(NOW + tonumber(ttl))
local args = {}
for _, pid in ipairs(permit_ids(id, tonumber(rec.permits))) do
  args[#args + 1] = expiry
  args[#args + 1] = pid
end
chunked('ZADD', TIMEOUT, {'XX'}, args)
redis.call('ZADD', HOLDERS, 'XX', expiry, id)
local slack = (tonumber(rec.expires) or NOW) - NOW
late_heartbeat(slack, rec.ttl)
rec.ttl, rec.expires = ttl, expiry
save(rec)
local entry = '{"type":"renewed","lease_id":"' .. id .. '","holder":' .. jsn(rec.holder)
  .. ',"permits":' .. rec.permits .. ',"ttl_ms":' .. ttl .. ',"at_ms":' .. NOW_S .. '}'
append_history(entry, st.hexp)
events[#events + 1] = entry
flush_state()
return '{"status":"renewed","reentry_count":' .. rec.permits .. ',"ttl_ms":' .. ttl
  .. ',"now_ms":' .. NOW_S .. ',"fencing_token":' .. rec.fence .. ',"slack_ms":' .. d(slack)
  .. ',"holder":' .. jsn(rec.holder) .. (revocation and (',"revocation":' .. revocation) or '')
  .. ev(events) .. '}'
