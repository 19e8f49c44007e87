-- Take permits of a semaphore for a new lease (Redisson RPermitExpirableSemaphore layout;
-- each lease's permits expire on their own). The first acquirer sets the limit (as Redisson's
-- trySetPermits); while permits are out, later ones must name the same; with none out, a new
-- limit stands (a limit ends with the semaphore's last permit). KEYS, ARGV[1..2]: see
-- prelude.lua. Then:
-- A(1) ttl_ms: ttl (ms)
-- A(2) lease_id: the new lease id (the one the new token proves)
-- A(3) limit: the limit the caller expects
-- A(4) permits: permits wanted
-- A(5) nonce: this request's nonce (see acquire.lua)
-- The optional ones follow; the caller leaves out those at the end that are "" (none):
-- A(6) holder: holder label
-- A(7) metadata: metadata as JSON text
-- A(8) key_digest: sha256 hex of the request's Idempotency-Key
-- A(9) fingerprint: sha256 hex of what the request asks (checked against the key's first request)
-- A(10) sealed_token: the new token sealed under the Idempotency-Key (hex)
-- Returns: JSON with status = acquired | held (with pttl: when the next permit expires) |
--   limit_mismatch | kind_conflict | lease_lost | idempotency_mismatch | too_late; a retried
--   key's answer carries replayed = true and sealed; `ev`: events to publish (expiries noticed).
--   The same call run again (see "Run twice" in prelude.lua) finds the lease's permits out
--   (their ids come from the lease id, made for this request) and answers the same grant, not
--   marked replayed, with `expires_ms`, taking nothing more.
if not semaphore_begin(KEYS, ARGV) then return TOO_LATE end
-- (A(n) is ARGV[n + 2], read directly here: a function call per argument adds up.)
local ttl, id, limit_s, wanted_s, nonce = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local label, meta = ARGV[8] or '', ARGV[9] or ''
local idem, fp, sealed = ARGV[10] or '', ARGV[11] or '', ARGV[12] or ''
local limit, wanted = tonumber(limit_s), tonumber(wanted_s)
local events = {}

local first, first_lease, first_sealed, by = idem_find(idem, fp)
if first == 'mismatch' then return '{"status":"idempotency_mismatch"}' end
if first then
  -- (This very call run again gets its answer as it was, and the grant stays this request's
  -- to roll back: see "Run twice" in prelude.lua.)
  local same = same_request(by, nonce)
  local rec, st = load(first_lease)
  if rec or first_lease ~= '' then
    local ok, refusal = check_permits(first_lease, rec, st.hexp, events)
    if not ok then return string.sub(refusal, 1, -2) .. ev(events) .. '}' end
    if not same then
      rec.nonce = ''
      save(rec)
      flush_state()
    end
  end
  if same then return first end
  return idem_replay(first, first_sealed)
end

-- The permits free: a number, or nil when L is not a semaphore's counter (yet).
local ok, free = pcall(redis.call, 'GET', L)
local available = ok and tonumber(free)
-- The usual request: no Idempotency-Key, a semaphore Leasehold set up with this limit, and
-- enough permits free. It reads the two fields of the state it needs (limit, fence), not
-- load's ten; anything else (a refusal, a first acquire, a Redisson-made semaphore, an
-- idempotent retry) is looked at below, as before.
local usual, last_fence = false, nil
if idem == '' and available and available >= wanted then
  local v = redis.call('HMGET', STATE, 'limit', 'fence')
  usual, last_fence = v[1] and tonumber(v[1]) == limit, v[2]
end
-- This request's permits are out already: its call runs again (see below).
local mine = false
if not usual then
  local _, st = load('', true)
  last_fence = st.fence
  local known
  if st.limit and available then
    known = st.limit
  else
    local use = name_use(st)
    if use ~= 'semaphore' and use ~= 'none' then
      return '{"status":"kind_conflict","held_as":"' .. use .. '"}'
    end
    reclaim_expired(events, st.hexp)
    if use == 'none' then
      -- Redisson's trySetPermits: the counter starts at the limit, minus permits still held.
      -- A state hash left by a lock of this name may have an expiry: a semaphore's has none.
      redis.call('SET', L, d(limit - live_permits()))
      redis.call('PERSIST', STATE)
      redis.call('HDEL', STATE, 'sexp')
      set_state('limit', limit_s)
      known = limit
    else
      known = limit_of(st)
      if known == limit then set_state('limit', limit_s) end
    end
    available = tonumber(redis.call('GET', L))
  end
  if known ~= limit and st.limit then
    -- No permit out (expired ones returned first): the limit asked for now stands. Redisson's
    -- zset of held permits is gone, so no Redisson client holds one either.
    reclaim_expired(events, st.hexp)
    if redis.call('EXISTS', TIMEOUT) == 0 then
      redis.call('SET', L, limit_s)
      set_state('limit', limit_s)
      known, available = limit, limit
    end
  end
  if known ~= limit then
    flush_state()
    return '{"status":"limit_mismatch","limit":' .. jt(known and d(known)) .. ev(events) .. '}'
  end
  if available < wanted then
    reclaim_expired(events, st.hexp)
    available = tonumber(redis.call('GET', L))
  end
  if available < wanted then
    -- (Not enough left, maybe because this request took them: see below.)
    mine = redis.call('ZSCORE', TIMEOUT, permit_id(id, 1)) ~= false
    if not mine then
      flush_state()
      local next_free = redis.call('ZRANGEBYSCORE', TIMEOUT, '(' .. NOW_S, '+inf',
        'WITHSCORES', 'LIMIT', 0, 1)
      local pttl = next_free[2] and (tonumber(next_free[2]) - NOW) or -1
      return '{"status":"held","pttl":' .. d(pttl) .. ',"available":' .. d(available)
        .. ev(events) .. '}'
    end
  end
end
if not mine then
  -- The permits are added only where they are not out yet (NX): none added means this
  -- request's are (the usual request needs no read to know it).
  local expiry = d(NOW + tonumber(ttl))
  local added
  if wanted == 1 then
    added = redis.call('ZADD', TIMEOUT, 'NX', expiry, permit_id(id, 1))
  else
    local args = {}
    for i = 1, wanted do
      args[2 * i - 1], args[2 * i] = expiry, permit_id(id, i)
    end
    added = chunked('ZADD', TIMEOUT, {'NX'}, args)
  end
  mine = added == 0
  if not mine then
    redis.call('DECRBY', L, wanted_s)
    redis.call('ZADD', HOLDERS, expiry, id)
    local fence = next_fence(last_fence)
    create_held(id, 'semaphore', ttl, expiry, fence, nonce, label, meta, true, wanted_s)
    set_state('fence', fence)
    flush_state()
    local json = '{"status":"acquired","lease_id":"' .. id .. '","kind":"semaphore",'
      .. '"reentry_count":' .. wanted_s .. ',"fencing_token":' .. fence .. ',"ttl_ms":' .. ttl
      .. ',"now_ms":' .. NOW_S .. ',"now_us":' .. NOW_US_S .. ',"created_ms":' .. NOW_S
      .. ',"available":' .. d(available - wanted) .. ',"holder":' .. jsn(label) .. ev(events)
      .. '}'
    if idem ~= '' then idem_store(idem, fp, json, id, sealed, tonumber(ttl) + TOMB, nonce) end
    return json
  end
end
-- This request's lease holds its permits already: its id comes from a token made for the
-- request, so this is its call run again (see "Run twice" in prelude.lua). The same grant,
-- taking nothing more (or lost, if its permits ran out since).
local rec, st = load(id, false, true)
local ok_held, refusal = check_permits(id, rec, st.hexp, events)
if not ok_held then return string.sub(refusal, 1, -2) .. ev(events) .. '}' end
local read, now_free = pcall(redis.call, 'GET', L)
return '{"status":"acquired","lease_id":"' .. id .. '","kind":"semaphore","reentry_count":'
  .. rec.permits .. ',"fencing_token":' .. rec.fence .. ',"ttl_ms":' .. rec.ttl .. ',"now_ms":'
  .. NOW_S .. ',"now_us":' .. NOW_US_S .. ',"created_ms":' .. rec.since .. ',"expires_ms":'
  .. rec.expires .. ',"available":' .. d(read and tonumber(now_free) or 0) .. ',"holder":'
  .. jsn(rec.holder) .. ev(events) .. '}'
