-- Heartbeat: extend a live lease's TTL, for every lock kind, guarded by the lease token. A read
-- hold renews its own rwlock_timeout keys as well as the lock hash (renewing only the hash is
-- how read locks get lost elsewhere). A lease that lost its lock is reported lost, never
-- re-acquired. KEYS: see locklib.lua. ARGV[1..4]: see prelude.lua.
-- ARGV[5]: lease id
-- ARGV[6]: sha256 hex of the presented token
-- ARGV[7]: new ttl (ms); "0" keeps the lease's own TTL
-- Returns: JSON with status = renewed | lease_lost | queued | forbidden | unknown_lease;
--   renewed carries slack_ms, how much of the old TTL was left when the heartbeat came.
local lease, refusal = authorize_lease(ARGV[5], ARGV[6])
if refusal then return refusal end

local ttl = tonumber(ARGV[7])
if ttl == 0 then ttl = lease.ttl end
local h = holder_id(lease.id)
local count
if is_rw(lease.kind) then
  count = refresh_rw(h, ttl)
else
  redis.call('PEXPIRE', L, ttl)
  count = tonumber(redis.call('HGET', L, h))
end
redis.call('HSET', lease.key, 'ttl_ms', ttl, 'expires_ms', NOW + ttl)
touch_lease(lease, ttl + TOMB)
publish_event({type = 'renewed', lease_id = lease.id, holder = lease.holder,
  reentry_count = count, ttl_ms = ttl})
return encode({status = 'renewed', reentry_count = count, ttl_ms = ttl, now_ms = NOW,
  fencing_token = lease.fence, slack_ms = (lease.expires or NOW) - NOW})
