-- Lock helpers shared by every lock script (after prelude.lua). Every lock script receives
-- the same KEYS, so these helpers can name them:
-- KEYS[1]: the lock hash (L), Redisson's layout
-- KEYS[2]: the lock's state hash ({L}:leasehold): fence, lease (last lease), kind
-- KEYS[3]: the lock's hash tag ("{L}"): lease records, token index, rwlock_timeout keys and
--          the waiting-writers zset are built from it, as Redisson builds its rwlock_timeout
--          keys: same tag, same cluster slot
-- KEYS[4]: Redisson's RLock/RFairLock channel (redisson_lock__channel:{L})
-- KEYS[5]: Redisson's RReadWriteLock channel (redisson_rwlock:{L})
-- KEYS[6]: Redisson's RFairLock queue (redisson_lock_queue:{L}), a list of holder ids
-- KEYS[7]: Redisson's RFairLock timeouts (redisson_lock_timeout:{L}), holder id -> deadline
local L, STATE, TAG, CHANNEL, RW_CHANNEL, QUEUE, TIMEOUTS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]

local function writers_key() return TAG .. ':leasehold:writers' end
local function rw_timeout_key(field, n) return TAG .. ':' .. field .. ':rwlock_timeout:' .. n end

-- What the lock is used as right now: semaphore, rw, fair, exclusive, reentrant (also a
-- Redisson RLock), or nil when free with nobody queued.
local function held_as()
  local t = redis.call('TYPE', L).ok
  if t == 'string' or t == 'zset' then return 'semaphore' end
  if t == 'hash' then
    if redis.call('HEXISTS', L, 'mode') == 1 then return 'rw' end
    -- The recorded kind speaks only while its lease holds the lock; anyone else (a Redisson
    -- client) is "foreign" and merely contends.
    local st = redis.call('HMGET', STATE, 'lease', 'kind')
    if st[1] and redis.call('HEXISTS', L, holder_id(st[1])) == 1 then return st[2] end
    if redis.call('EXISTS', QUEUE) == 1 then return 'fair' end
    return 'foreign'
  end
  if t ~= 'none' then return t end
  if redis.call('EXISTS', QUEUE) == 1 then return 'fair' end
  return nil
end

local function family(kind)
  if is_rw(kind) then return 'rw' end
  return kind
end

-- The kind a request may not use while the lock is used as another, or nil.
local function conflict_with(kind)
  local now_as = held_as()
  if now_as == nil or now_as == family(kind) then return nil end
  if now_as == 'foreign' and not is_rw(kind) then return nil end
  return now_as
end

-- Drops waiters at the head of the fair queue whose deadline passed (Redisson does the same;
-- a dead waiter delays the queue by at most its liveness window).
local function prune_queue()
  while true do
    local head = redis.call('LINDEX', QUEUE, 0)
    if not head then return nil end
    local deadline = tonumber(redis.call('ZSCORE', TIMEOUTS, head))
    if deadline and deadline > NOW then return head end
    redis.call('LPOP', QUEUE)
    redis.call('ZREM', TIMEOUTS, head)
  end
end

-- After the lock was let go: wake the fair queue's head alone, on its own channel as
-- Redisson's RFairLock does (O(1) whatever the queue's length, no thundering herd), or
-- everyone on the lock's channel (Redisson's RLock unlock message).
local function wake_next()
  local head = prune_queue()
  if head then
    redis.call('PUBLISH', CHANNEL .. ':' .. head, 0)
  else
    redis.call('PUBLISH', CHANNEL, 0)
  end
end

-- A read holder is alive while one of its rwlock_timeout keys is.
local function reader_alive(field, count)
  for i = count, 1, -1 do
    if redis.call('EXISTS', rw_timeout_key(field, i)) == 1 then return true end
  end
  return false
end

-- Whether the lease still holds the lock (any mode).
local function lease_holds(lease)
  local field = holder_id(lease.id)
  if redis.call('HEXISTS', L, field) == 1 then return true end
  return is_rw(lease.kind) and redis.call('HEXISTS', L, field .. ':write') == 1
end

-- A lease whose fields vanished while its record still says "held" ran out of TTL: record
-- that and return the lease's state.
local function observe_expiry(lease, lock_name, events, tomb)
  if lease.state ~= 'held' then return lease.state end
  end_lease(lease, 'expired', tomb, lease.expires)
  publish_event(events, lock_name, {type = 'expired', lease_id = lease.id, holder = lease.holder})
  return 'expired'
end

-- Removes read holders whose every timeout key expired: they stopped heartbeating while
-- other readers kept the lock hash alive. Each such lease is recorded as expired.
local function prune_dead_readers(lock_name, events, tomb)
  if redis.call('HEXISTS', L, 'mode') == 0 then return end
  local flat = redis.call('HGETALL', L)
  for i = 1, #flat, 2 do
    local field, count = flat[i], tonumber(flat[i + 1])
    if field ~= 'mode' and not string.find(field, ':write$') and count
      and not reader_alive(field, count) then
      redis.call('HDEL', L, field)
      local lease = read_lease(TAG, string.match(field, '^(.*):1$') or field)
      if lease and not lease_holds(lease) then observe_expiry(lease, lock_name, events, tomb) end
    end
  end
  if redis.call('HLEN', L) == 1 then
    redis.call('DEL', L)
    redis.call('PUBLISH', RW_CHANNEL, 0)
  end
end

-- The longest remaining read hold, or -1.
local function max_read_ttl()
  local best = -1
  local flat = redis.call('HGETALL', L)
  for i = 1, #flat, 2 do
    local field, count = flat[i], tonumber(flat[i + 1])
    if field ~= 'mode' and not string.find(field, ':write$') and count then
      for n = count, 1, -1 do
        best = math.max(best, redis.call('PTTL', rw_timeout_key(field, n)))
      end
    end
  end
  return best
end

-- Checks a presented token against a lease and that the lease still holds the lock.
-- Returns the lease, or nil and the JSON refusal to return.
local function authorize_lease(id, digest, lock_name, events, tomb)
  local lease = read_lease(TAG, id)
  if not lease or lease.kind == 'semaphore' then
    return nil, cjson.encode({status = 'unknown_lease'})
  end
  if not same_digest(lease.digest, digest) then
    return nil, cjson.encode({status = 'forbidden'})
  end
  if is_rw(lease.kind) then prune_dead_readers(lock_name, events, tomb) end
  if lease.state == 'queued' then
    return nil, cjson.encode({status = 'queued'})
  end
  if not lease_holds(lease) then
    return nil, cjson.encode({status = 'lease_lost',
      state = observe_expiry(lease, lock_name, events, tomb)})
  end
  return lease, nil
end
