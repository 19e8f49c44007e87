-- Heartbeat for a semaphore lease: every one of its permits expires later. KEYS: see
-- semlib.lua. ARGV[1..4]: see prelude.lua.
-- ARGV[5]: lease id
-- ARGV[6]: sha256 hex of the presented token
-- ARGV[7]: new ttl (ms); "0" keeps the lease's own TTL
-- Returns: JSON with status = renewed | lease_lost | forbidden | unknown_lease
local lease, refusal = authorize_permits(ARGV[5], ARGV[6])
if refusal then return refusal end
local ttl = tonumber(ARGV[7])
if ttl == 0 then ttl = lease.ttl end
local expiry = NOW + ttl
local args = {}
for _, pid in ipairs(permit_ids(lease.id, lease.permits)) do
  args[#args + 1] = expiry
  args[#args + 1] = pid
end
chunked('ZADD', TIMEOUT, {'XX'}, args)
redis.call('ZADD', HOLDERS, 'XX', expiry, lease.id)
redis.call('HSET', lease.key, 'ttl_ms', ttl, 'expires_ms', expiry)
touch_lease(lease, ttl + TOMB)
publish_event({type = 'renewed', lease_id = lease.id, holder = lease.holder,
  permits = lease.permits, ttl_ms = ttl})
return encode({status = 'renewed', reentry_count = lease.permits, ttl_ms = ttl,
  now_ms = NOW, fencing_token = lease.fence, slack_ms = (lease.expires or NOW) - NOW})
