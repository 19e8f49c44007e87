-- Heartbeat: extend a live lease's TTL (Redisson's watchdog renewal, guarded by the lease token).
-- A lease whose field is gone is reported lost and never re-acquired here.
-- KEYS[1]: the lock hash (L)
-- KEYS[2]: the lease key ({L}:leasehold:lease:<lease-id>)
-- KEYS[3]: the lease's token key ({L}:leasehold:token:<sha256 hex of the presented token>)
-- ARGV[1]: lease id
-- ARGV[2]: sha256 hex of the presented token
-- ARGV[3]: new ttl (ms); "0" keeps the lease's own TTL
-- ARGV[4]: lock name as the API shows it (for events)
-- ARGV[5]: events channel
-- ARGV[6]: how long a lease stays answerable after it ends (ms)
-- Returns: JSON with status = renewed | lease_lost | forbidden | unknown_lease;
--   renewed carries slack_ms, how much of the old TTL was left when the heartbeat came.
local tomb = tonumber(ARGV[6])
local lease, refusal = authorize_lease(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[4], ARGV[5], tomb)
if refusal then return refusal end

local ttl = tonumber(ARGV[3])
if ttl == 0 then ttl = lease.ttl_ms end
local slack = redis.call('PTTL', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('HSET', KEYS[2], 'ttl_ms', ttl, 'expires_ms', NOW + ttl)
redis.call('PEXPIRE', KEYS[2], ttl + tomb)
redis.call('PEXPIRE', KEYS[3], ttl + tomb)
local count = tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. ':1'))
publish_event(ARGV[5], ARGV[4], {type = 'renewed', lease_id = ARGV[1], holder = lease.holder,
  reentry_count = count, ttl_ms = ttl})
return cjson.encode({status = 'renewed', reentry_count = count, ttl_ms = ttl, now_ms = NOW,
  fencing_token = lease.fencing_token, slack_ms = slack})
