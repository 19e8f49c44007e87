-- Read a semaphore in one snapshot: limit, permits in use (expired ones do not count), and
-- the holders: Leasehold leases, and the permits of Redisson clients as one entry. Changes
-- nothing. KEYS: see semlib.lua. ARGV[1..4]: see prelude.lua.
-- ARGV[5]: a lease id to describe as well ("" for none)
-- Returns: JSON {known, limit, used, fence, now_ms, holders = [{lease_id?, holder, metadata,
--   permits, fencing_token, created_ms, expires_ms}], lease?}
local use = name_use()
local holders, ours = {}, 0
local live = redis.call('ZRANGEBYSCORE', HOLDERS, '(' .. NOW, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local lease = read_lease(TAG, live[i])
  if lease and lease.state == 'held' then
    holders[#holders + 1] = {lease_id = lease.id, permits = lease.permits,
      expires_ms = tonumber(live[i + 1]), holder = lease.holder, fencing_token = lease.fence,
      created_ms = lease.acquired, metadata = redis.call('HGET', lease.key, 'metadata') or nil}
    ours = ours + (lease.permits or 0)
  end
end
local used = 0
if use == 'semaphore' then used = live_permits() end
if used > ours then
  -- Permits held by Redisson clients: they name no lease.
  local next_free = redis.call('ZRANGEBYSCORE', TIMEOUT, '(' .. NOW, '+inf', 'WITHSCORES',
    'LIMIT', 0, 1)
  holders[#holders + 1] = {permits = used - ours, holder = 'redisson',
    expires_ms = tonumber(next_free[2])}
end
local limit = (use == 'semaphore') and limit_of() or nil
local result = {known = limit ~= nil, limit = limit, used = used,
  fence = tonumber(redis.call('HGET', STATE, 'fence') or 0), holders = holders, now_ms = NOW}
if ARGV[5] ~= '' then
  local lease = read_lease(TAG, ARGV[5])
  if lease and lease.kind == 'semaphore' then
    local s = lease.state
    if s == 'held' and not permits_held(lease) then s = 'expired' end
    local rec = redis.call('HMGET', lease.key, 'metadata', 'ended_ms')
    result.lease = {state = s, holder = lease.holder, metadata = rec[1] or nil,
      fencing_token = lease.fence, ttl_ms = lease.ttl, created_ms = lease.acquired,
      expires_ms = lease.expires,
      ended_ms = tonumber(rec[2]) or ((s == 'expired') and lease.expires or nil),
      permits = lease.permits}
  end
end
return encode(result)
