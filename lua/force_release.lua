-- Admin force release: remove every holder of a lock of any kind (Leasehold leases and
-- Redisson clients alike), as Redisson's forceUnlock does, and wake waiters (the fair queue's
-- head, or everyone). Each removed Leasehold lease is marked force_released, so its holder's
-- next call gets 410. Queued fair waiters keep their places. A key some other program made
-- is left alone. KEYS: see locklib.lua. ARGV[1..4]: see prelude.lua.
-- ARGV[5]: who asked (for the event)
-- ARGV[6]: why (free text, "" for none)
-- Returns: JSON {status = force_released | not_held | kind_conflict (held_as), holders =
--   [{holder_id, reentry_count, lease_id?, holder?, fencing_token?, created_ms?}]}
local t = redis.call('TYPE', L).ok
if t == 'none' then return encode({status = 'not_held'}) end
if t ~= 'hash' or not lock_shaped() then
  local as = held_as(false)
  if as == 'semaphore' or as == 'idle_semaphore' then as = 'semaphore' else as = 'foreign' end
  return encode({status = 'kind_conflict', held_as = as})
end
local rw = redis.call('HEXISTS', L, 'mode') == 1
local flat = redis.call('HGETALL', L)
local by_holder, order = {}, {}
for i = 1, #flat, 2 do
  local field, count = flat[i], tonumber(flat[i + 1])
  if field ~= 'mode' then
    local base = string.match(field, '^(.*):write$') or field
    if rw and not string.find(field, ':write$') then
      for n = 1, count do redis.call('DEL', rw_timeout_key(field, n)) end
    end
    if not by_holder[base] then
      by_holder[base] = {holder_id = base, reentry_count = 0}
      order[#order + 1] = base
    end
    by_holder[base].reentry_count = by_holder[base].reentry_count + count
  end
end
local removed, lease_ids = {}, {}
for _, base in ipairs(order) do
  local entry = by_holder[base]
  local id = string.match(base, '^(.*):1$')
  local lease = id and read_lease(TAG, id)
  if lease and lease.state == 'held' then
    entry.lease_id = id
    entry.holder = lease.holder
    entry.fencing_token = lease.fence
    entry.created_ms = lease.acquired
    lease_ids[#lease_ids + 1] = id
    end_lease(lease, 'force_released')
  end
  removed[#removed + 1] = entry
end
redis.call('DEL', L)
wake_next()
redis.call('PUBLISH', RW_CHANNEL, 0)
publish_event({type = 'force_released', lease_ids = lease_ids, holder_ids = order,
  by = ARGV[5], reason = ARGV[6]})
return encode({status = 'force_released', holders = removed})
