-- Heartbeat: extend a live lease's TTL, for every lock kind, guarded by the lease token. A read
-- hold renews its own rwlock_timeout keys as well as the lock hash (renewing only the hash is
-- how read locks get lost elsewhere). A lease that lost its lock is reported lost, never
-- re-acquired; its lock-delay follows its new expiry. KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) lease_id: lease id
-- A(2) proven: "1" when the presented token proves the lease id
-- A(3) ttl_ms: new ttl (ms); "0" keeps the lease's own TTL
-- Returns: JSON with status = renewed | lease_lost | queued | forbidden | unknown_lease |
--   too_late; renewed carries slack_ms, how much of the old TTL was left when the heartbeat
--   came, and the lease's holder.
if not lock_begin(KEYS, ARGV) then return TOO_LATE end
local id, proven, ttl = A(1), A(2) == '1', A(3)
local rec, st = load(id)
if not proven then return not_yours(id, rec) end
local events = {}
local reads, writes = check_held(id, rec, st.hexp, events)
if not reads then return string.sub(writes, 1, -2) .. ev(events) .. '}' end
if ttl == '0' then ttl = rec.ttl end
local revocation
ttl, revocation = ttl_within_revocation(id, ttl)
if is_rw(rec.kind) then
  refresh_rw(holder_id(id), ttl, reads, writes)
else
  redis.call('PEXPIRE', L, ttl)
end
local slack = (tonumber(rec.expires) or NOW) - NOW
late_heartbeat(slack, rec.ttl)
local ttl_n = tonumber(ttl)
lease_extended(rec, ttl_n, writes, st.q)
rec.ttl, rec.expires = ttl, d(NOW + ttl_n)
save(rec)
flush_state(NOW + ttl_n + TOMB, st.sexp)
local entry = '{"type":"renewed","lease_id":"' .. id .. '","holder":' .. jsn(rec.holder)
  .. ',"reentry_count":' .. d(reads + writes) .. ',"ttl_ms":' .. ttl .. ',"at_ms":' .. NOW_S
  .. '}'
append_history(entry, st.hexp)
events[#events + 1] = entry
return '{"status":"renewed","reentry_count":' .. d(reads + writes) .. ',"ttl_ms":' .. ttl
  .. ',"now_ms":' .. NOW_S .. ',"fencing_token":' .. rec.fence .. ',"slack_ms":' .. d(slack)
  .. ',"holder":' .. jsn(rec.holder) .. (revocation and (',"revocation":' .. revocation) or '')
  .. ev(events) .. '}'
