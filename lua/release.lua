-- Release one reentry level of a lease (or all of them), as Redisson's RLock unlock does: at
-- count 0 the lock hash is deleted and Redisson's unlock message (0) is published on the lock's
-- channel, so Leasehold and Redisson waiters alike wake up.
-- KEYS[1]: the lock hash (L)
-- KEYS[2]: the lease key ({L}:leasehold:lease:<lease-id>)
-- KEYS[3]: the lease's token key ({L}:leasehold:token:<sha256 hex of the presented token>)
-- KEYS[4]: Redisson's unlock channel (redisson_lock__channel:{L})
-- ARGV[1]: lease id
-- ARGV[2]: sha256 hex of the presented token
-- ARGV[3]: "all" to release every level, "one" for one level
-- ARGV[4]: lock name as the API shows it (for events)
-- ARGV[5]: events channel
-- ARGV[6]: how long a lease stays answerable after it ends (ms)
-- ARGV[7]: why: "released", or "client_gone" when a grant nobody received is rolled back
-- Returns: JSON with status = released | still_held | lease_lost | forbidden | unknown_lease
local tomb = tonumber(ARGV[6])
local lease, refusal = authorize_lease(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[4], ARGV[5], tomb)
if refusal then return refusal end

local count = 0
if ARGV[3] ~= 'all' then count = redis.call('HINCRBY', KEYS[1], ARGV[1] .. ':1', -1) end
if count > 0 then
  redis.call('PEXPIRE', KEYS[1], lease.ttl_ms)
  redis.call('HSET', KEYS[2], 'expires_ms', NOW + lease.ttl_ms)
  redis.call('PEXPIRE', KEYS[2], lease.ttl_ms + tomb)
  redis.call('PEXPIRE', KEYS[3], lease.ttl_ms + tomb)
  publish_event(ARGV[5], ARGV[4], {type = 'released', lease_id = ARGV[1], holder = lease.holder,
    reentry_count = count, reason = ARGV[7]})
  return cjson.encode({status = 'still_held', reentry_count = count, ttl_ms = lease.ttl_ms,
    now_ms = NOW})
end

redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[4], 0)
redis.call('HSET', KEYS[2], 'state', 'released', 'ended_ms', NOW)
redis.call('PEXPIRE', KEYS[2], tomb)
redis.call('PEXPIRE', KEYS[3], tomb)
publish_event(ARGV[5], ARGV[4], {type = 'released', lease_id = ARGV[1], holder = lease.holder,
  reentry_count = 0, reason = ARGV[7]})
return cjson.encode({status = 'released', reentry_count = 0, now_ms = NOW})
