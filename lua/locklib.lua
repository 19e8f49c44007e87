-- Lock helpers shared by every lock script (after prelude.lua). Every lock script receives
-- the same KEYS, so these helpers can name them:
-- KEYS[1]: the lock hash (L), Redisson's layout
-- KEYS[2]: the lock's state hash ({L}:leasehold): fence, lease (last lease), kind; limit
--          while the name is a semaphore
-- KEYS[3]: the lock's hash tag ("{L}"): lease records, token index, rwlock_timeout keys, the
--          waiting-writers zset and, for a semaphore of the same name, Redisson's timeout zset
--          are built from it, as Redisson builds its rwlock_timeout keys: same tag, same slot
-- KEYS[4]: Redisson's RLock/RFairLock channel (redisson_lock__channel:{L})
-- KEYS[5]: Redisson's RReadWriteLock channel (redisson_rwlock:{L})
-- KEYS[6]: Redisson's RFairLock queue (redisson_lock_queue:{L}), a list of holder ids
-- KEYS[7]: Redisson's RFairLock timeouts (redisson_lock_timeout:{L}), holder id -> deadline
local L, STATE, TAG, CHANNEL, RW_CHANNEL, QUEUE, TIMEOUTS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]

local function writers_key() return TAG .. ':leasehold:writers' end
local function rw_timeout_key(field, n) return TAG .. ':' .. field .. ':rwlock_timeout:' .. n end

-- A semaphore of the same name (Redisson's RPermitExpirableSemaphore: L is its permit
-- counter, {L}:timeout its held permits), and Leasehold's index of its leases.
local function sem_timeout_key() return TAG .. ':timeout' end
local function sem_holders_key() return TAG .. ':leasehold:holders' end

local function lock_shaped() return hash_is_lock(L) end

-- What the string L is: 'busy' (a semaphore with permits out), 'idle' (a semaphore with every
-- permit back), or nil (not a semaphore: some other program's string).
local function semaphore_state()
  local known = redis.call('HEXISTS', STATE, 'limit') == 1
  if not known and redis.call('EXISTS', sem_timeout_key()) == 0 then return nil end
  if not string.find(redis.call('GET', L), '^%-?%d+$') then return nil end
  if redis.call('ZCOUNT', sem_timeout_key(), '(' .. NOW, '+inf') > 0 then return 'busy' end
  return 'idle'
end

-- Drops waiters at the head of the fair queue whose deadline passed (Redisson does the same;
-- a dead waiter delays the queue by at most its liveness window). Returns the live head.
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

-- Whether a live waiter is queued (looking past dead ones without removing them).
local function queue_alive()
  for i = 0, 99 do
    local waiter = redis.call('LINDEX', QUEUE, i)
    if not waiter then return false end
    local deadline = tonumber(redis.call('ZSCORE', TIMEOUTS, waiter))
    if deadline and deadline > NOW then return true end
  end
  return true
end

-- What the name is used as now: semaphore (permits out), idle_semaphore, rw, fair,
-- exclusive, reentrant, foreign (a Redisson-layout lock no lease of ours holds), alien (a key
-- some other program made), or nil when free with nobody queued. `prune`: drop dead fair
-- waiters on the way (scripts that change state), so an abandoned ticket blocks other kinds
-- no longer than its liveness window.
local function held_as(prune)
  local live_queue = function()
    if prune then return prune_queue() ~= nil end
    return queue_alive()
  end
  local t = redis.call('TYPE', L).ok
  if t == 'none' then
    if live_queue() then return 'fair' end
    return nil
  end
  if t == 'string' then
    local s = semaphore_state()
    if s == 'busy' then return 'semaphore' end
    if s == 'idle' then return 'idle_semaphore' end
    return 'alien'
  end
  if t ~= 'hash' then return 'alien' end
  local st = redis.call('HMGET', STATE, 'lease', 'kind')
  local ours = st[1] and redis.call('HEXISTS', L, holder_id(st[1])) == 1
  if redis.call('HEXISTS', L, 'mode') == 1 then
    if ours or lock_shaped() then return 'rw' end
    return 'alien'
  end
  -- The recorded kind speaks only while its lease holds the lock; anyone else (a Redisson
  -- client) is foreign and merely contends.
  if ours then return st[2] end
  if not lock_shaped() then return 'alien' end
  if live_queue() then return 'fair' end
  return 'foreign'
end

local function family(kind)
  if is_rw(kind) then return 'rw' end
  return kind
end

-- Gives an idle semaphore's name to a lock: its counter, permits and limit go.
local function clear_idle_semaphore()
  redis.call('DEL', L, sem_timeout_key(), sem_holders_key())
  redis.call('HDEL', STATE, 'limit')
end

-- The kind a request may not use while the name is used as another (`foreign` for a key of
-- another program), or nil.
local function conflict_with(kind)
  local now_as = held_as(true)
  if now_as == 'idle_semaphore' then
    clear_idle_semaphore()
    return nil
  end
  if now_as == nil or now_as == family(kind) then return nil end
  if now_as == 'alien' then return 'foreign' end
  if now_as == 'foreign' and not is_rw(kind) then return nil end
  return now_as
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

-- Whether the lease still holds the lock (any mode). The name may be a semaphore (or
-- another program's key) by now.
local function lease_holds(lease)
  if redis.call('TYPE', L).ok ~= 'hash' then return false end
  local field = holder_id(lease.id)
  if redis.call('HEXISTS', L, field) == 1 then return true end
  return is_rw(lease.kind) and redis.call('HEXISTS', L, field .. ':write') == 1
end

-- A lease whose fields vanished while its record still says "held" ran out of TTL: record
-- that and return the lease's state.
local function observe_expiry(lease)
  if lease.state ~= 'held' then return lease.state end
  end_lease(lease, 'expired', lease.expires)
  publish_event({type = 'expired', lease_id = lease.id, holder = lease.holder})
  return 'expired'
end

-- Removes read holders whose every timeout key expired: they stopped heartbeating while
-- other readers kept the lock hash alive. Each such lease is recorded as expired.
local function prune_dead_readers()
  if redis.call('TYPE', L).ok ~= 'hash' or redis.call('HEXISTS', L, 'mode') == 0 then return end
  local flat = redis.call('HGETALL', L)
  for i = 1, #flat, 2 do
    local field, count = flat[i], tonumber(flat[i + 1])
    if field ~= 'mode' and not string.find(field, ':write$') and count
      and not reader_alive(field, count) then
      redis.call('HDEL', L, field)
      local lease = read_lease(TAG, string.match(field, '^(.*):1$') or field)
      if lease and not lease_holds(lease) then observe_expiry(lease) end
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

-- Gives every hold of read/write holder `h` the TTL `ttl` from now: all its read levels'
-- timeout keys, and the lock hash (exactly `ttl` while it writes, else at least `ttl`). A
-- lease's levels share the lease's TTL, so releasing one level never leaves another with an
-- older, shorter one. Returns the holder's levels.
local function refresh_rw(h, ttl)
  local reads = tonumber(redis.call('HGET', L, h)) or 0
  local writes = tonumber(redis.call('HGET', L, h .. ':write')) or 0
  for n = 1, reads do redis.call('PEXPIRE', rw_timeout_key(h, n), ttl) end
  if writes > 0 then
    redis.call('PEXPIRE', L, ttl)
  else
    redis.call('PEXPIRE', L, math.max(redis.call('PTTL', L), ttl))
  end
  return reads + writes
end

-- Checks a presented token against a lease and that the lease still holds the lock.
-- Returns the lease, or nil and the refusal to return.
local function authorize_lease(id, digest)
  local lease = read_lease(TAG, id)
  if not lease or lease.kind == 'semaphore' then
    return nil, encode({status = 'unknown_lease'})
  end
  if not same_digest(lease.digest, digest) then
    return nil, encode({status = 'forbidden'})
  end
  if is_rw(lease.kind) then prune_dead_readers() end
  if lease.state == 'queued' then
    return nil, encode({status = 'queued'})
  end
  if not lease_holds(lease) then
    return nil, encode({status = 'lease_lost', state = observe_expiry(lease)})
  end
  return lease, nil
end
