-- Part of acquire.lua's made-once part (the library puts it where acquire.lua has the line
-- `-- @part acquire_free`): how a lock found free is granted, to a read or write hold (the
-- fifo policy's earlier writers first) or to a lease of a fixed kind. It uses acquire.lua's
-- per-call values.

-- The live waiting writer that arrived before `arrival` and so goes first under the fifo
-- policy, dropping dead entries; returns its deadline or nil.
local function earlier_writer()
  local wkey, until_key = writers_key(), writers_key() .. ':until'
  local ids = redis.call('ZRANGEBYSCORE', wkey, '-inf', '(' .. arrival)
  for _, wid in ipairs(ids) do
    local deadline = tonumber(redis.call('ZSCORE', until_key, wid))
    if deadline and deadline > NOW and wid ~= id then return deadline end
    redis.call('ZREM', wkey, wid)
    redis.call('ZREM', until_key, wid)
  end
  return nil
end

-- One more read or write hold for this lease; returns the new count for that mode, or nil
-- and a reason: "blocked" (with the time to retry) or "upgrade". `free`: L does not exist.
local function rw_enter(want, holding, free)
  local w = h .. ':write'
  if free then
    if want == 'read' then
      redis.call('HSET', L, 'mode', 'read', h, '1')
      redis.call('SET', rw_timeout_key(h, 1), '1', 'PX', ttl)
    else
      redis.call('HSET', L, 'mode', 'write', w, '1')
      if arrival ~= NOW_S then
        redis.call('ZREM', writers_key(), id)
        redis.call('ZREM', writers_key() .. ':until', id)
      end
    end
    redis.call('PEXPIRE', L, ttl)
    return 1
  end
  prune_dead_readers(events, st.hexp)
  local mode = redis.call('HGET', L, 'mode')
  if want == 'read' then
    local ok = (not mode) or mode == 'read' or redis.call('HEXISTS', L, w) == 1
    if ok and policy == 'fifo' and not holding then
      local deadline = earlier_writer()
      if deadline then
        local pttl = redis.call('PTTL', L)
        return nil, 'blocked', (pttl > 0) and math.min(pttl, deadline - NOW) or deadline - NOW
      end
    end
    if not ok then return nil, 'blocked', redis.call('PTTL', L) end
    if not mode then redis.call('HSET', L, 'mode', 'read') end
    local n = redis.call('HINCRBY', L, h, 1)
    redis.call('SET', rw_timeout_key(h, n), '1', 'PX', ttl)
    if redis.call('PTTL', L) < tonumber(ttl) then redis.call('PEXPIRE', L, ttl) end
    return n
  end
  if not mode then
    redis.call('HSET', L, 'mode', 'write', w, '1')
    redis.call('PEXPIRE', L, ttl)
    redis.call('ZREM', writers_key(), id)
    redis.call('ZREM', writers_key() .. ':until', id)
    return 1
  end
  if mode == 'write' and redis.call('HEXISTS', L, w) == 1 then
    local n = redis.call('HINCRBY', L, w, 1)
    if redis.call('PTTL', L) < tonumber(ttl) then redis.call('PEXPIRE', L, ttl) end
    return n
  end
  if redis.call('HEXISTS', L, h) == 1 then return nil, 'upgrade' end
  -- Blocked: stand in line so that fifo readers arriving later wait behind us.
  redis.call('ZADD', writers_key(), 'NX', arrival, id)
  redis.call('ZADD', writers_key() .. ':until', d(NOW + tonumber(liveness)), id)
  return nil, 'blocked', redis.call('PTTL', L)
end

-- A new read or write lease on a name nobody uses (the usual request, see below): rw_enter's
-- hold, and what grant writes for it, without the general path's reads and tables (a shared
-- lease's record is its own, and the name's kind is not recorded for it); nil when the state
-- shows a fair queue, which the general path looks at. (A function of its own: Lua allows a
-- function 60 upvalues, and the per-call part is near that.)
local function grant_free_rw()
  local v = redis.call('HMGET', STATE, 'fence', 'q', 'sexp')
  if v[2] then return nil end
  rw_enter(kind, false, true)
  local fence = next_fence(v[1])
  local ttl_n = ttl + 0
  create_held(id, kind, ttl, d(NOW + ttl_n), fence, nonce, label, meta, true)
  keep_delay(asked_delay(), NOW + ttl_n, true)
  set_state('fence', fence)
  flush_state(NOW + ttl_n + TOMB, v[3])
  return acquired('acquired', '1', fence, NOW_S, label)
end

-- A new reentrant, exclusive or fair lease on a name nobody uses (the usual request, see
-- below): what grant writes for it, without the general path's reads and tables; nil when
-- the state shows a fair queue, or a lease whose record still says held (it ran out
-- unnoticed, and its expiry must be recorded), which the general path looks at.
local function grant_free_fixed()
  local v = redis.call('HMGET', STATE, 'rec', 'fence', 'q', 'sexp', 'holder', 'meta')
  -- (104 is "h": of the states a record can be in, only "held" starts with it; string.byte
  -- answers with a number, where string.sub would make a string for Redis's Lua to hash.)
  local last = v[1]
  if not v[3] and string.byte(last or '') ~= 104 then
    redis.call('HSET', L, h, '1')
    redis.call('PEXPIRE', L, ttl)
    local fence = next_fence(v[2])
    local ttl_n = ttl + 0
    if label ~= '' or (v[5] or '') ~= '' then set_state('holder', label) end
    if meta ~= '' or (v[6] or '') ~= '' then set_state('meta', meta) end
    -- The name's kind (`kind`) is written with the record of every lease in the fixed
    -- fields, and only then, so it is the kind of the last record (`last`): compared here
    -- rather than read. (A record's first letters are its state, then "|" and its kind;
    -- no later field holds a letter.)
    if not last or not string.find(last, KIND_FIELD[kind], 1, true) then
      set_state('kind', kind)
    end
    keep_delay(asked_delay(), NOW + ttl_n, false)
    if kind == 'fair' then log_term(id, fence, label, meta) end
    local pexpire = renewal(NOW + ttl_n + TOMB, v[4])
    -- (The fixed fields and what was queued, in one HSET; the record as pack() makes it.)
    redis.call('HSET', STATE, 'lease', id, 'rec', 'held|' .. kind .. '|' .. ttl .. '|' .. NOW_S
      .. '|' .. d(NOW + ttl_n) .. '|' .. fence .. '|' .. nonce .. '||', 'fence', fence,
      unpack(W, 1, WN))
    WN = 0
    if pexpire then redis.call('PEXPIRE', STATE, pexpire) end
    return acquired('acquired', '1', fence, NOW_S, label)
  end
  return nil
end

