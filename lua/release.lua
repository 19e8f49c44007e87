-- Release one reentry level of a lease (or all of them), for every lock kind, as Redisson's
-- unlock scripts do: at zero the lock is deleted and waiters are woken (RLock: the unlock
-- message 0 on the lock's channel; RFairLock: only the queue's head, on its own channel;
-- RReadWriteLock: on redisson_rwlock:{L}, and a write hold released under a read hold of the
-- same lease turns the lock into a read lock). KEYS: see locklib.lua.
-- ARGV[1]: lease id
-- ARGV[2]: sha256 hex of the presented token
-- ARGV[3]: "all" to release every level, "one" for one level
-- ARGV[4]: lock name as the API shows it (for events)
-- ARGV[5]: events channel
-- ARGV[6]: how long an ended lease stays answerable (ms)
-- ARGV[7]: why: "released", or "client_gone" when a grant nobody received is rolled back
-- ARGV[8]: read/write leases: which hold to release, "read", "write" or "" (write first)
-- Returns: JSON with status = released | still_held | mode_not_held | lease_lost | queued |
--   forbidden | unknown_lease; released carries the lease's kind and held_ms, its age (ms)
local all, lock_name, events, tomb = ARGV[3] == 'all', ARGV[4], ARGV[5], tonumber(ARGV[6])
local lease, refusal = authorize_lease(ARGV[1], ARGV[2], lock_name, events, tomb)
if refusal then return refusal end

local h = holder_id(lease.id)
local left
if is_rw(lease.kind) then
  local w = h .. ':write'
  local writes = tonumber(redis.call('HGET', L, w)) or 0
  local reads = tonumber(redis.call('HGET', L, h)) or 0
  local which = ARGV[8]
  if which == '' then which = (writes > 0) and 'write' or 'read' end
  if (which == 'write' and writes == 0) or (which == 'read' and reads == 0) then
    return cjson.encode({status = 'mode_not_held', mode = which})
  end
  if which == 'write' then
    writes = all and 0 or writes - 1
    if writes > 0 then redis.call('HSET', L, w, writes) else redis.call('HDEL', L, w) end
  else
    local n = all and reads or 1
    for i = reads, reads - n + 1, -1 do redis.call('DEL', rw_timeout_key(h, i)) end
    reads = reads - n
    if reads > 0 then redis.call('HSET', L, h, reads) else redis.call('HDEL', L, h) end
  end
  left = reads + writes
  if redis.call('HLEN', L) <= 1 then
    redis.call('DEL', L)
    redis.call('PUBLISH', RW_CHANNEL, 0)
  else
    if writes == 0 and redis.call('HGET', L, 'mode') == 'write' then
      -- The downgrade completes: our read holds remain, and other readers may now join.
      redis.call('HSET', L, 'mode', 'read')
      redis.call('PUBLISH', RW_CHANNEL, 0)
    end
    if redis.call('HGET', L, 'mode') == 'read' then
      local longest = max_read_ttl()
      if longest > 0 then redis.call('PEXPIRE', L, longest) end
    end
  end
else
  left = all and 0 or redis.call('HINCRBY', L, h, -1)
  if left > 0 then
    redis.call('PEXPIRE', L, lease.ttl)
  else
    redis.call('DEL', L)
    wake_next()
  end
end

if left > 0 then
  redis.call('HSET', lease.key, 'expires_ms', NOW + lease.ttl)
  touch_lease(lease, lease.ttl + tomb)
  publish_event(events, lock_name, {type = 'released', lease_id = lease.id, holder = lease.holder,
    reentry_count = left, reason = ARGV[7]})
  return cjson.encode({status = 'still_held', reentry_count = left})
end
end_lease(lease, 'released', tomb)
publish_event(events, lock_name, {type = 'released', lease_id = lease.id, holder = lease.holder,
  reentry_count = 0, reason = ARGV[7]})
return cjson.encode({status = 'released', kind = lease.kind, held_ms = NOW - (lease.created or NOW)})
