-- Give a semaphore lease's permits back and announce them on redisson_sc:{S}, waking waiters.
-- KEYS: see semlib.lua.
-- ARGV[1]: lease id
-- ARGV[2]: sha256 hex of the presented token
-- ARGV[3]: semaphore name as the API shows it (for events)
-- ARGV[4]: events channel
-- ARGV[5]: how long an ended lease stays answerable (ms)
-- ARGV[6]: why: "released", or "client_gone" when a grant nobody received is rolled back
-- Returns: JSON with status = released | lease_lost | forbidden | unknown_lease; released
--   carries kind = semaphore and held_ms, the lease's age (ms)
local tomb = tonumber(ARGV[5])
local lease, refusal = authorize_permits(ARGV[1], ARGV[2], ARGV[3], ARGV[4], tomb)
if refusal then return refusal end
local freed = 0
for i = 1, lease.permits do freed = freed + redis.call('ZREM', PERMITS, permit_id(lease.id, i)) end
local available = redis.call('INCRBY', S, freed)
redis.call('PUBLISH', PERMITS, available)
end_lease(lease, 'released', tomb)
publish_event(ARGV[4], ARGV[3], {type = 'released', lease_id = lease.id, holder = lease.holder,
  permits = lease.permits, reason = ARGV[6]})
return cjson.encode({status = 'released', kind = 'semaphore', held_ms = NOW - (lease.created or NOW)})
