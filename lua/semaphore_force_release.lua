-- Admin force release of a semaphore: every permit comes back, waiters wake, and each removed
-- lease is marked force_released (its holder's next call gets 410). KEYS: see semlib.lua.
-- ARGV[1]: semaphore name as the API shows it (for events)
-- ARGV[2]: events channel
-- ARGV[3]: how long an ended lease stays answerable (ms)
-- ARGV[4]: who asked (for the event)
-- ARGV[5]: why (free text, "" for none)
-- Returns: JSON {status = force_released | not_held, holders = [{holder_id, lease_id, holder,
--   reentry_count}]}
local tomb = tonumber(ARGV[3])
local held = redis.call('ZRANGE', PERMITS, 0, -1)
if #held == 0 then return cjson.encode({status = 'not_held'}) end
local removed, seen, ids = {}, {}, {}
for _, pid in ipairs(held) do
  local id = string.match(pid, '^(.*):%d+$') or pid
  if not seen[id] then
    local entry = {holder_id = id, reentry_count = 0}
    local lease = read_lease(TAG, id)
    if lease and lease.state == 'held' then
      entry.lease_id = id
      entry.holder = lease.holder
      entry.fencing_token = lease.fence
      entry.created_ms = lease.created
      ids[#ids + 1] = id
      end_lease(lease, 'force_released', tomb)
    end
    seen[id] = entry
    removed[#removed + 1] = entry
  end
  seen[id].reentry_count = seen[id].reentry_count + 1
end
redis.call('DEL', PERMITS)
local available = redis.call('INCRBY', S, #held)
redis.call('PUBLISH', PERMITS, available)
publish_event(ARGV[2], ARGV[1], {type = 'force_released', lease_ids = ids, by = ARGV[4],
  reason = ARGV[5]})
return cjson.encode({status = 'force_released', holders = removed})
