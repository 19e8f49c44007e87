-- Leasehold's Redis Function library, part 3: semaphore helpers (after prelude.lua), in
-- Redisson's RPermitExpirableSemaphore layout, so a Redisson client and Leasehold share the
-- permits and reclaim each other's expired ones. Every semaphore function calls
-- semaphore_begin() after begin(); L is the semaphore: a string holding the number of
-- available permits. Built from it, in the same slot:
-- TIMEOUT: {L}:timeout, Redisson's zset of held permit ids -> expiry (ms)
-- HOLDERS: {L}:leasehold:holders, Leasehold's leases on the semaphore -> expiry (ms): how
--          expired ones are found and leases listed without a scan
-- SEM_CHANNEL: redisson_sc:{L}, where freed permits are announced (the number now available)
-- A permit id is 16 raw bytes, as Redisson's are: a Leasehold lease's n permits are the first
-- 12 bytes of its UUID followed by 1..n as 4 big-endian bytes. A lease costs one zset member
-- per permit (Redisson counts expired permits by members) and O(1) everywhere else.
-- The semaphore's state hash never expires (Redisson's counter does not either): it holds the
-- limit.
local TIMEOUT, HOLDERS, SEM_CHANNEL

local function semaphore_begin(keys, argv)
  local ok = begin(keys, argv)
  TIMEOUT = tag() .. ':timeout'
  HOLDERS = tag() .. ':leasehold:holders'
  SEM_CHANNEL = 'redisson_sc:' .. tag()
  return ok
end

-- Permit ids are made from bytes looked up, not computed: gsub with a function per byte
-- cost more than the rest of a release (BENCHMARKS.md, W6).
-- BYTE: two hex digits -> that byte (both cases); SUFFIX[i]: permit number i as 4 bytes.
-- Made on first use: code run while FUNCTION LOAD loads the library cannot reach `string`.
local BYTE, SUFFIX
local function make_permit_tables()
  BYTE, SUFFIX = {}, {}
  for i = 0, 255 do
    BYTE[string.format('%02x', i)] = string.char(i)
    BYTE[string.format('%02X', i)] = string.char(i)
  end
  for i = 1, 64 do SUFFIX[i] = string.char(0, 0, 0, i) end
end

-- Lease id (a UUID's text) -> the 12 bytes its permit ids start with (its first 24 hex
-- digits). The last one is kept: a call asks for the same lease's prefix more than once.
local prefix_of, prefix = nil, nil
local function permit_prefix(id)
  if id ~= prefix_of then
    if not BYTE then make_permit_tables() end
    local s = string.sub
    prefix = BYTE[s(id, 1, 2)] .. BYTE[s(id, 3, 4)] .. BYTE[s(id, 5, 6)] .. BYTE[s(id, 7, 8)]
      .. BYTE[s(id, 10, 11)] .. BYTE[s(id, 12, 13)] .. BYTE[s(id, 15, 16)]
      .. BYTE[s(id, 17, 18)] .. BYTE[s(id, 20, 21)] .. BYTE[s(id, 22, 23)]
      .. BYTE[s(id, 25, 26)] .. BYTE[s(id, 27, 28)]
    prefix_of = id
  end
  return prefix
end

-- The raw id of lease `id`'s permit number `i` (1-based).
local function permit_id(id, i)
  return permit_prefix(id) .. (SUFFIX[i] or string.char(bit.band(bit.rshift(i, 24), 255),
    bit.band(bit.rshift(i, 16), 255), bit.band(bit.rshift(i, 8), 255), bit.band(i, 255)))
end

-- The raw permit ids of lease `id`'s first `n` permits.
local function permit_ids(id, n)
  local ids = {}
  for i = 1, n do ids[i] = permit_id(id, i) end
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
local function live_permits() return redis.call('ZCOUNT', TIMEOUT, '(' .. NOW_S, '+inf') end

-- Returns expired permits to the counter and announces them, as every Redisson script does
-- first; records Leasehold leases whose time ran out as expired (their events appended to
-- `events`).
local function reclaim_expired(events, hexp)
  local expired = redis.call('ZRANGEBYSCORE', TIMEOUT, '0', NOW_S)
  if #expired > 0 then
    chunked('ZREM', TIMEOUT, {}, expired)
    local value = redis.call('INCRBY', L, d(#expired))
    if value > 0 then redis.call(PUBLISH, SEM_CHANNEL, d(value)) end
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', NOW_S)) do
    redis.call('ZREM', HOLDERS, id)
    local rec = load(id)
    if rec and rec.state == 'held' then
      local e = finish(rec, 'expired', hexp, nil, rec.expires)
      if events then events[#events + 1] = e end
    end
  end
end

-- What L is: 'semaphore', 'none', or what it is used as instead (a lock's kind as Leasehold
-- records it, or 'foreign': a Redisson client's lock, or a key some other program made).
-- `st`: what the caller read of STATE (see load).
local function name_use(st)
  local t = redis.call('TYPE', L).ok
  if t == 'hash' then
    if st.lease and hash_is_lock(L) and (redis.call('HEXISTS', L, holder_id(st.lease)) == 1
      or redis.call('HEXISTS', L, holder_id(st.lease) .. ':write') == 1) then
      return st.kind
    end
    if redis.call('HEXISTS', L, 'mode') == 1 and hash_is_lock(L) then
      -- Our read/write leases are recorded as shared records: is one of them in L?
      for _, field in ipairs(redis.call('HKEYS', L)) do
        local id = string.match(field, '^(.*):1$') or string.match(field, '^(.*):1:write$')
        if id and redis.call('HEXISTS', STATE, 'r:' .. id) == 1 then return 'rw' end
      end
    end
    return 'foreign'
  end
  if t == 'string' then
    if not string.find(redis.call('GET', L), '^%-?%d+$') then return 'foreign' end
    if not st.limit and redis.call('EXISTS', TIMEOUT) == 0 then return 'foreign' end
    return 'semaphore'
  end
  if t ~= 'none' then return 'foreign' end
  -- A fair lock's queue of live waiters holds the name too.
  local head = redis.call('LINDEX', 'redisson_lock_queue:' .. tag(), 0)
  local deadline = head and tonumber(redis.call('ZSCORE', 'redisson_lock_timeout:' .. tag(), head))
  if deadline and deadline > NOW then return 'fair' end
  return 'none'
end

-- The semaphore's size: as Leasehold recorded it, or (made by a Redisson client) what is free
-- plus what is held.
local function limit_of(st)
  if st.limit then return st.limit end
  local free = tonumber(redis.call('GET', L))
  if not free then return nil end
  return free + live_permits()
end

-- Checks that lease `id` (whose record `rec` the caller read) still holds its permits.
-- Returns true, or nil and the refusal (JSON) to return. A lease whose time ran out is
-- recorded expired (its event appended to `events`).
local function check_permits(id, rec, hexp, events)
  if not rec then
    local ended = find_ended(id)
    if ended and ended.kind == 'semaphore' then
      return nil, '{"status":"lease_lost","state":"' .. ended.state .. '"}'
    end
    return nil, '{"status":"unknown_lease"}'
  end
  if rec.kind ~= 'semaphore' then return nil, '{"status":"unknown_lease"}' end
  if rec.state ~= 'held' then
    return nil, '{"status":"lease_lost","state":"' .. rec.state .. '"}'
  end
  local expires = tonumber(rec.expires) or 0
  local score = tonumber(redis.call('ZSCORE', TIMEOUT, permit_id(id, 1)))
  if score == nil or score <= NOW or expires <= NOW then
    redis.call('ZREM', HOLDERS, id)
    events[#events + 1] = finish(rec, 'expired', hexp, nil, expires < NOW and rec.expires or NOW_S)
    return nil, '{"status":"lease_lost","state":"expired"}'
  end
  return true
end
