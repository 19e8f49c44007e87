-- Read a lock's state in one snapshot: what it is used as, its holders (Leasehold leases and
-- Redisson clients; read/write counts per holder), its fair queue in order, the time left and
-- the fencing counter. Changes nothing; never reads out a key some other program made.
-- KEYS: see locklib.lua. ARGV[1..4]: see prelude.lua.
-- ARGV[5]: how many queued waiters to list at most
-- Returns: JSON {known, held_as, mode, fence, pttl, now_ms, queue_length,
--   holders = [{holder_id, reentry_count, read_count, write_count, lease_id?, holder?,
--     metadata?, fencing_token?, created_ms?, kind?}],
--   queue = [{holder_id, deadline_ms, lease_id?, holder?, queued_ms?}]}
local holders, by_holder = {}, {}
local mode = false
local as = held_as(false)
if as == 'idle_semaphore' then as = 'semaphore' end
if as == 'alien' then as = 'foreign' end
if redis.call('TYPE', L).ok == 'hash' and lock_shaped() then
  mode = redis.call('HGET', L, 'mode')
  local flat = redis.call('HGETALL', L)
  for i = 1, #flat, 2 do
    local field, count = flat[i], tonumber(flat[i + 1])
    if field ~= 'mode' and count then
      local base = string.match(field, '^(.*):write$')
      local writes = base and count or 0
      base = base or field
      local entry = by_holder[base]
      if not entry then
        entry = {holder_id = base, reentry_count = 0, read_count = 0, write_count = 0}
        by_holder[base] = entry
        holders[#holders + 1] = entry
        local id = string.match(base, '^(.*):1$')
        local rec = id and redis.call('HMGET', lease_key(TAG, id), 'holder', 'metadata',
          'fencing_token', 'created_ms', 'kind', 'acquired_ms')
        if rec and rec[3] then
          entry.lease_id = id
          entry.holder = rec[1]
          entry.metadata = rec[2]
          entry.fencing_token = tonumber(rec[3])
          entry.created_ms = tonumber(rec[6] or rec[4])
          entry.kind = rec[5]
        end
      end
      entry.reentry_count = entry.reentry_count + count
      if mode then
        entry.write_count = entry.write_count + writes
        entry.read_count = entry.read_count + (count - writes)
      end
    end
  end
end
local queue = {}
local limit = tonumber(ARGV[5])
local waiting = redis.call('LRANGE', QUEUE, 0, limit - 1)
for _, field in ipairs(waiting) do
  local entry = {holder_id = field, deadline_ms = tonumber(redis.call('ZSCORE', TIMEOUTS, field))}
  local id = string.match(field, '^(.*):1$')
  local rec = id and redis.call('HMGET', lease_key(TAG, id), 'holder', 'queued_ms', 'state')
  if rec and rec[3] then
    entry.lease_id = id
    entry.holder = rec[1]
    entry.queued_ms = tonumber(rec[2])
  end
  queue[#queue + 1] = entry
end
local fence = redis.call('HGET', STATE, 'fence')
return encode({known = (fence ~= false) or (#holders > 0) or (#queue > 0) or as ~= nil,
  held_as = as, mode = mode or nil, fence = tonumber(fence or 0), pttl = redis.call('PTTL', L),
  holders = holders, queue = queue, queue_length = redis.call('LLEN', QUEUE), now_ms = NOW})
