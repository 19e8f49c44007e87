-- Admin force release of a semaphore: every permit comes back (Redisson clients' too),
-- waiters wake, and each removed lease is marked force_released (its holder's next call gets
-- 410). With "clear", the semaphore itself goes as well (its counter and limit): the next
-- acquirer sets a new limit, and the name can be used as a lock. KEYS: see semlib.lua.
-- ARGV[1..4]: see prelude.lua.
-- ARGV[5]: who asked (for the event)
-- ARGV[6]: why (free text, "" for none)
-- ARGV[7]: "clear" to remove the semaphore, "" to return its permits
-- Returns: JSON {status = force_released | not_held | kind_conflict (held_as), holders =
--   [{holder_id, reentry_count, lease_id?, holder?, fencing_token?, created_ms?}]}
local clear = ARGV[7] == 'clear'
local use = name_use()
if use == 'none' then return encode({status = 'not_held'}) end
if use ~= 'semaphore' then return encode({status = 'kind_conflict', held_as = use}) end
local members = redis.call('ZCARD', TIMEOUT)
local live = live_permits()
local removed, ids, ours = {}, {}, 0
for _, id in ipairs(redis.call('ZRANGE', HOLDERS, 0, -1)) do
  local lease = read_lease(TAG, id)
  if lease and lease.state == 'held' then
    removed[#removed + 1] = {holder_id = id, lease_id = id, holder = lease.holder,
      reentry_count = lease.permits, fencing_token = lease.fence, created_ms = lease.acquired}
    ids[#ids + 1] = id
    ours = ours + (lease.permits or 0)
    end_lease(lease, 'force_released')
  end
end
if live > ours then
  removed[#removed + 1] = {holder_id = 'redisson', reentry_count = live - ours}
end
if #removed == 0 and not clear then return encode({status = 'not_held'}) end
redis.call('DEL', TIMEOUT, HOLDERS)
if clear then
  redis.call('DEL', S)
  redis.call('HDEL', STATE, 'limit')
  redis.call('PUBLISH', CHANNEL, 0)
else
  local available = redis.call('INCRBY', S, members)
  if available > 0 then redis.call('PUBLISH', CHANNEL, available) end
end
publish_event({type = 'force_released', lease_ids = ids, by = ARGV[5], reason = ARGV[6],
  cleared = clear})
return encode({status = 'force_released', holders = removed})
