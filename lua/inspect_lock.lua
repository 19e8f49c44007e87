-- Read a lock's state in one snapshot: what it is used as, its holders (Leasehold leases and
-- Redisson clients; read/write counts per holder), its fair queue in order, the time left and
-- the fencing counter. Changes nothing; never reads out a key some other program made.
-- KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) queue_listed: how many queued waiters to list at most
-- Returns: JSON {known, held_as, mode, fence, pttl, now_ms, queue_length, lock_delay_ms?,
--   delay_pttl? (the lock-delay key's: the name refuses new leases for that long once free),
--   holders = [{holder_id, reentry_count, read_count, write_count, lease_id?, holder?,
--     metadata?, fencing_token?, created_ms?, kind?}],
--   queue = [{holder_id, deadline_ms, lease_id?, holder?, queued_ms?}]}
lock_begin(KEYS, ARGV)
local _, st = load('')
local holders, by_holder = {}, {}
local mode = false
local as = held_as(st, false)
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
        local rec = id and load(id, true)
        if rec and rec.state == 'held' then
          entry.lease_id = id
          entry.holder = rec.holder
          entry.metadata = rec.meta
          entry.fencing_token = tonumber(rec.fence)
          entry.created_ms = tonumber(rec.since)
          entry.kind = rec.kind
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
local limit = tonumber(A(1))
local waiting = redis.call('LRANGE', queue_key(), 0, limit - 1)
-- Tickets whose deadline passed unpolled are not waiting any more (the next call that serves
-- the queue, or the sweepers, drop them): not listed, not counted.
local gone = 0
for _, field in ipairs(waiting) do
  local deadline = tonumber(redis.call('ZSCORE', timeouts_key(), field))
  if deadline and deadline <= NOW then
    gone = gone + 1
  else
    local entry = {holder_id = field, deadline_ms = deadline}
    local id = string.match(field, '^(.*):1$')
    local rec = id and load(id)
    if rec and rec.state == 'queued' then
      entry.lease_id = id
      entry.holder = rec.holder
      entry.queued_ms = tonumber(rec.since)
    end
    queue[#queue + 1] = entry
  end
end
-- The lock-delay (locklib.lua): what its holders asked for, and how long it lives.
local delay_ms = redis.call('GET', delay_key())
local delay_pttl = delay_ms and redis.call('PTTL', delay_key()) or nil
return encode({known = (st.fence ~= false) or (#holders > 0) or (#queue > 0) or as ~= nil
  or delay_ms ~= false,
  lock_delay_ms = delay_ms and tonumber(delay_ms) or nil, delay_pttl = delay_pttl,
  held_as = as, mode = mode or nil, fence = tonumber(st.fence or 0),
  pttl = redis.call('PTTL', L), holders = holders, queue = queue,
  queue_length = redis.call('LLEN', queue_key()) - gone, now_ms = NOW})
