-- Semaphore helpers (after prelude.lua), in Redisson's RPermitExpirableSemaphore layout, so a
-- Redisson client and Leasehold share the permits and reclaim each other's expired ones.
-- Every semaphore script receives the same KEYS:
-- KEYS[1]: the semaphore (S): a string holding the number of available permits
-- KEYS[2]: its state hash ({S}:leasehold): fence, limit
-- KEYS[3]: its hash tag ("{S}"); built from it, in the same slot: {S}:timeout (Redisson's
--          zset of held permit ids -> expiry, ms) and {S}:leasehold:holders (Leasehold's
--          leases on the semaphore -> expiry, ms: how they are listed without a scan)
-- KEYS[4]: redisson_sc:{S}: where freed permits are announced (the number now available)
-- A permit id is 16 raw bytes, as Redisson's are: a Leasehold lease's n permits are the first
-- 12 bytes of its UUID followed by 1..n as 4 big-endian bytes. A lease costs one zset member
-- per permit (Redisson counts expired permits by members) and O(1) everywhere else.
local S, STATE, TAG, CHANNEL = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local TIMEOUT = TAG .. ':timeout'
local HOLDERS = TAG .. ':leasehold:holders'

-- The raw permit ids of lease `id`'s first `n` permits.
local function permit_ids(id, n)
  local hex = string.sub(string.gsub(id, '-', ''), 1, 24)
  local prefix = string.gsub(hex, '..', function(h) return string.char(tonumber(h, 16)) end)
  local ids = {}
  for i = 1, n do
    ids[i] = prefix .. string.char(bit.band(bit.rshift(i, 24), 255),
      bit.band(bit.rshift(i, 16), 255), bit.band(bit.rshift(i, 8), 255), bit.band(i, 255))
  end
  return ids
end

-- Runs `cmd` on `key` with `args` in chunks (Lua's unpack has a limit).
local function chunked(cmd, key, prefix_args, args)
  local total = 0
  for i = 1, #args, 4000 do
    local part = {}
    for _, a in ipairs(prefix_args) do part[#part + 1] = a end
    for j = i, math.min(i + 3999, #args) do part[#part + 1] = args[j] end
    total = total + redis.call(cmd, key, unpack(part))
  end
  return total
end

-- Permits held now (live: not yet expired), Redisson's and ours.
local function live_permits() return redis.call('ZCOUNT', TIMEOUT, '(' .. NOW, '+inf') end

-- Returns expired permits to the counter and announces them, as every Redisson script does
-- first; records Leasehold leases whose time ran out as expired.
local function reclaim_expired()
  local expired = redis.call('ZRANGEBYSCORE', TIMEOUT, 0, NOW)
  if #expired > 0 then
    chunked('ZREM', TIMEOUT, {}, expired)
    local value = redis.call('INCRBY', S, #expired)
    if value > 0 then redis.call('PUBLISH', CHANNEL, value) end
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', NOW)) do
    redis.call('ZREM', HOLDERS, id)
    local lease = read_lease(TAG, id)
    if lease and lease.state == 'held' then
      end_lease(lease, 'expired', lease.expires)
      publish_event({type = 'expired', lease_id = id, holder = lease.holder})
    end
  end
end

-- What S is: 'semaphore', 'none', or what it is used as instead (a lock's kind as
-- Leasehold records it, or 'foreign': a Redisson client's lock, or a key some other program
-- made).
local function name_use()
  local t = redis.call('TYPE', S).ok
  if t == 'hash' then
    local st = redis.call('HMGET', STATE, 'lease', 'kind')
    if st[1] and hash_is_lock(S) and (redis.call('HEXISTS', S, holder_id(st[1])) == 1
      or redis.call('HEXISTS', S, holder_id(st[1]) .. ':write') == 1) then
      return st[2]
    end
    return 'foreign'
  end
  if t == 'string' then
    if not string.find(redis.call('GET', S), '^%-?%d+$') then return 'foreign' end
    if redis.call('HEXISTS', STATE, 'limit') == 0 and redis.call('EXISTS', TIMEOUT) == 0 then
      return 'foreign'
    end
    return 'semaphore'
  end
  if t ~= 'none' then return 'foreign' end
  -- A fair lock's queue of live waiters holds the name too.
  local head = redis.call('LINDEX', 'redisson_lock_queue:' .. TAG, 0)
  local deadline = head and tonumber(redis.call('ZSCORE', 'redisson_lock_timeout:' .. TAG, head))
  if deadline and deadline > NOW then return 'fair' end
  return 'none'
end

-- The semaphore's size: as Leasehold recorded it, or (made by a Redisson client) what is free
-- plus what is held.
local function limit_of()
  local known = tonumber(redis.call('HGET', STATE, 'limit'))
  if known then return known end
  local free = tonumber(redis.call('GET', S))
  if not free then return nil end
  return free + live_permits()
end

-- Whether a lease still holds its permits.
local function permits_held(lease)
  local score = tonumber(redis.call('ZSCORE', TIMEOUT, permit_ids(lease.id, 1)[1]))
  return lease.state == 'held' and score ~= nil and score > NOW
end

-- Checks a presented token against a semaphore lease that still holds its permits.
-- Returns the lease, or nil and the refusal to return.
local function authorize_permits(id, digest)
  reclaim_expired()
  local lease = read_lease(TAG, id)
  if not lease or lease.kind ~= 'semaphore' then
    return nil, encode({status = 'unknown_lease'})
  end
  if not same_digest(lease.digest, digest) then
    return nil, encode({status = 'forbidden'})
  end
  if not permits_held(lease) then
    local state = lease.state
    if state == 'held' then
      end_lease(lease, 'expired', lease.expires)
      state = 'expired'
    end
    return nil, encode({status = 'lease_lost', state = state})
  end
  return lease, nil
end
