-- Heartbeat for a semaphore lease: every one of its permits expires later. KEYS: see semlib.lua.
-- ARGV[1]: lease id
-- ARGV[2]: sha256 hex of the presented token
-- ARGV[3]: new ttl (ms); "0" keeps the lease's own TTL
-- ARGV[4]: semaphore name as the API shows it (for events)
-- ARGV[5]: events channel
-- ARGV[6]: how long an ended lease stays answerable (ms)
-- Returns: JSON with status = renewed | lease_lost | forbidden | unknown_lease
local tomb = tonumber(ARGV[6])
local lease, refusal = authorize_permits(ARGV[1], ARGV[2], ARGV[4], ARGV[5], tomb)
if refusal then return refusal end
local ttl = tonumber(ARGV[3])
if ttl == 0 then ttl = lease.ttl end
for i = 1, lease.permits do redis.call('ZADD', PERMITS, 'XX', NOW + ttl, permit_id(lease.id, i)) end
redis.call('HSET', lease.key, 'ttl_ms', ttl, 'expires_ms', NOW + ttl)
touch_lease(lease, ttl + tomb)
publish_event(ARGV[5], ARGV[4], {type = 'renewed', lease_id = lease.id, holder = lease.holder,
  permits = lease.permits, ttl_ms = ttl})
return cjson.encode({status = 'renewed', reentry_count = lease.permits, ttl_ms = ttl,
  now_ms = NOW, fencing_token = lease.fence, slack_ms = (lease.expires or NOW) - NOW})
