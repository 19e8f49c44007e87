-- Heartbeat: extend a live lease's TTL, for every lock kind, guarded by the lease token. A read
-- hold renews its own rwlock_timeout keys as well as the lock hash (renewing only the hash is
-- how read locks get lost elsewhere). A lease that lost its lock is reported lost, never
-- re-acquired. KEYS: see locklib.lua.
-- ARGV[1]: lease id
-- ARGV[2]: sha256 hex of the presented token
-- ARGV[3]: new ttl (ms); "0" keeps the lease's own TTL
-- ARGV[4]: lock name as the API shows it (for events)
-- ARGV[5]: events channel
-- ARGV[6]: how long an ended lease stays answerable (ms)
-- Returns: JSON with status = renewed | lease_lost | queued | forbidden | unknown_lease;
--   renewed carries slack_ms, how much of the old TTL was left when the heartbeat came.
local tomb = tonumber(ARGV[6])
local lease, refusal = authorize_lease(ARGV[1], ARGV[2], ARGV[4], ARGV[5], tomb)
if refusal then return refusal end

local ttl = tonumber(ARGV[3])
if ttl == 0 then ttl = lease.ttl end
local h = holder_id(lease.id)
local count
if is_rw(lease.kind) then
  local reads = tonumber(redis.call('HGET', L, h)) or 0
  local writes = tonumber(redis.call('HGET', L, h .. ':write')) or 0
  for n = 1, reads do redis.call('PEXPIRE', rw_timeout_key(h, n), ttl) end
  if writes > 0 then
    redis.call('PEXPIRE', L, ttl)
  else
    redis.call('PEXPIRE', L, math.max(redis.call('PTTL', L), ttl))
  end
  count = reads + writes
else
  redis.call('PEXPIRE', L, ttl)
  count = tonumber(redis.call('HGET', L, h))
end
redis.call('HSET', lease.key, 'ttl_ms', ttl, 'expires_ms', NOW + ttl)
touch_lease(lease, ttl + tomb)
publish_event(ARGV[5], ARGV[4], {type = 'renewed', lease_id = lease.id, holder = lease.holder,
  reentry_count = count, ttl_ms = ttl})
return cjson.encode({status = 'renewed', reentry_count = count, ttl_ms = ttl, now_ms = NOW,
  fencing_token = lease.fence, slack_ms = (lease.expires or NOW) - NOW})
