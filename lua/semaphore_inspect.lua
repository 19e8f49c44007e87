-- Read a semaphore in one snapshot: limit, permits in use (expired ones do not count), and
-- the holders: Leasehold leases, and the permits of Redisson clients as one entry. Changes
-- nothing. KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) lease_id: a lease id to describe as well ("" for none)
-- Returns: JSON {known, limit, used, fence, now_ms, holders = [{lease_id?, holder, metadata,
--   permits, fencing_token, created_ms, expires_ms}], lease?}; the lease has `revocation`
--   (its record's JSON, as text: see revoke.lua) and, while held, `waiters`
semaphore_begin(KEYS, ARGV)
local want = A(1)
local described, st = load(want, true)
local use = name_use(st)
local holders, ours = {}, 0
local live = redis.call('ZRANGEBYSCORE', HOLDERS, '(' .. NOW_S, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local rec = load(live[i])
  if rec and rec.state == 'held' then
    holders[#holders + 1] = {lease_id = rec.id, permits = tonumber(rec.permits),
      expires_ms = tonumber(live[i + 1]), holder = rec.holder,
      fencing_token = tonumber(rec.fence), created_ms = tonumber(rec.since),
      metadata = rec.meta}
    ours = ours + (tonumber(rec.permits) or 0)
  end
end
local used = 0
if use == 'semaphore' then used = live_permits() end
if used > ours then
  -- Permits held by Redisson clients: they name no lease.
  local next_free = redis.call('ZRANGEBYSCORE', TIMEOUT, '(' .. NOW_S, '+inf', 'WITHSCORES',
    'LIMIT', 0, 1)
  holders[#holders + 1] = {permits = used - ours, holder = 'redisson',
    expires_ms = tonumber(next_free[2])}
end
local limit = (use == 'semaphore') and limit_of(st) or nil
local result = {known = limit ~= nil, limit = limit, used = used,
  fence = tonumber(st.fence or 0), holders = holders, now_ms = NOW}
if want ~= '' then
  if described and described.kind == 'semaphore' then
    local s = described.state
    local score = tonumber(redis.call('ZSCORE', TIMEOUT, permit_id(want, 1)))
    local expires = tonumber(described.expires)
    local ended = tonumber(described.ended)
    if s == 'held' and (score == nil or score <= NOW or expires <= NOW) then
      s = 'expired'
      ended = math.min(expires, NOW)
    end
    result.lease = {state = s, holder = described.holder, metadata = described.meta,
      fencing_token = tonumber(described.fence), ttl_ms = tonumber(described.ttl),
      created_ms = tonumber(described.since), expires_ms = expires, ended_ms = ended,
      permits = tonumber(described.permits), revocation = revocation_of(want)}
    if s == 'held' then result.lease.waiters = waiting_count() end
  elseif not described then
    local e = find_ended(want)
    if e and e.kind == 'semaphore' then
      result.lease = {state = e.state, holder = e.holder, fencing_token = e.fence,
        created_ms = e.since, ended_ms = e.ended, permits = e.permits,
        revocation = revocation_of(want)}
    end
  end
end
return encode(result)
