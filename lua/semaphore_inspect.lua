-- Read a semaphore in one snapshot: limit, permits in use (expired ones do not count), and
-- the holders. Changes nothing. KEYS: see semlib.lua.
-- ARGV[1]: a lease id to describe as well ("" for none)
-- Returns: JSON {known, limit, used, fence, now_ms, holders = [{lease_id, holder, metadata,
--   permits, fencing_token, created_ms, expires_ms}], lease?}
local live = redis.call('ZRANGEBYSCORE', PERMITS, '(' .. NOW, '+inf', 'WITHSCORES')
local holders, by_id = {}, {}
for i = 1, #live, 2 do
  local id = string.match(live[i], '^(.*):%d+$')
  if id then
    local entry = by_id[id]
    if not entry then
      entry = {lease_id = id, permits = 0, expires_ms = tonumber(live[i + 1])}
      local lease = read_lease(TAG, id)
      if lease then
        entry.holder = lease.holder
        entry.fencing_token = lease.fence
        entry.created_ms = lease.created
        entry.metadata = redis.call('HGET', lease.key, 'metadata') or nil
      end
      by_id[id] = entry
      holders[#holders + 1] = entry
    end
    entry.permits = entry.permits + 1
  end
end
local state = redis.call('HMGET', STATE, 'limit', 'fence')
local result = {known = state[1] ~= false, limit = tonumber(state[1]), used = #live / 2,
  fence = tonumber(state[2] or 0), holders = holders, now_ms = NOW}
if ARGV[1] ~= '' then
  local lease = read_lease(TAG, ARGV[1])
  if lease and lease.kind == 'semaphore' then
    local s = lease.state
    local held = by_id[lease.id]
    if s == 'held' and not held then s = 'expired' end
    local rec = redis.call('HMGET', lease.key, 'metadata', 'ended_ms')
    result.lease = {state = s, holder = lease.holder, metadata = rec[1] or nil,
      fencing_token = lease.fence, ttl_ms = lease.ttl, created_ms = lease.created,
      expires_ms = lease.expires, ended_ms = tonumber(rec[2]) or ((s == 'expired') and lease.expires or nil),
      permits = lease.permits}
  end
end
return cjson.encode(result)
