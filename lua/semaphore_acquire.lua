-- Take permits of a semaphore for a new lease (Redisson RPermitExpirableSemaphore layout;
-- each lease's permits expire on their own). The first acquirer sets the limit (as Redisson's
-- trySetPermits); later ones must name the same. KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1): ttl (ms)
-- A(2): the new lease id (the one the new token proves)
-- A(3): holder label ("" for none)
-- A(4): metadata as JSON text ("" for none)
-- A(5): the limit the caller expects
-- A(6): permits wanted
-- A(7): this request's nonce (see acquire.lua)
-- A(8): sha256 hex of the request's Idempotency-Key, or ""
-- A(9): sha256 hex of what the request asks, or "" without a key
-- A(10): the new token sealed under the Idempotency-Key (hex), or ""
-- Returns: JSON with status = acquired | held (with pttl: when the next permit expires) |
--   limit_mismatch | kind_conflict | lease_lost | idempotency_mismatch | too_late; a retried
--   key's answer carries replayed = true and sealed; `ev`: events to publish (expiries noticed)
if not semaphore_begin(KEYS, ARGV) then return TOO_LATE end
local ttl, id = A(1), A(2)
local limit, wanted = tonumber(A(5)), tonumber(A(6))
local nonce, idem, fp, sealed = A(7), A(8), A(9), A(10)
local events = {}

local first, first_lease, first_sealed = idem_find(idem, fp)
if first == 'mismatch' then return '{"status":"idempotency_mismatch"}' end
if first then
  local rec, st = load(first_lease)
  if rec or first_lease ~= '' then
    local ok, refusal = check_permits(first_lease, rec, st.hexp, events)
    if not ok then return string.sub(refusal, 1, -2) .. ev(events) .. '}' end
    rec.nonce = ''
    save(rec)
    flush_state()
  end
  return idem_replay(first, first_sealed)
end

local _, st = load('', true)
local ok, available = pcall(redis.call, 'GET', L)
available = ok and tonumber(available)
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
    -- Redisson's trySetPermits: the counter starts at the limit, minus permits still held. A
    -- state hash left by a lock of this name may have an expiry: a semaphore's has none.
    redis.call('SET', L, d(limit - live_permits()))
    redis.call('PERSIST', STATE)
    redis.call('HDEL', STATE, 'sexp')
    set_state('limit', A(5))
    known = limit
  else
    known = limit_of(st)
    if known == limit then set_state('limit', A(5)) end
  end
  available = tonumber(redis.call('GET', L))
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
  flush_state()
  local next_free = redis.call('ZRANGEBYSCORE', TIMEOUT, '(' .. NOW_S, '+inf', 'WITHSCORES',
    'LIMIT', 0, 1)
  local pttl = next_free[2] and (tonumber(next_free[2]) - NOW) or -1
  return '{"status":"held","pttl":' .. d(pttl) .. ',"available":' .. d(available) .. ev(events)
    .. '}'
end
redis.call('DECRBY', L, A(6))
local expiry = d(NOW + tonumber(ttl))
local args = {}
for _, pid in ipairs(permit_ids(id, wanted)) do
  args[#args + 1] = expiry
  args[#args + 1] = pid
end
chunked('ZADD', TIMEOUT, {}, args)
redis.call('ZADD', HOLDERS, expiry, id)
local fence = next_fence(st.fence)
create({id = id, state = 'held', kind = 'semaphore', ttl = ttl, since = NOW_S, expires = expiry,
  fence = fence, nonce = nonce, permits = A(6), holder = A(3), meta = A(4), shared = true})
set_state('fence', fence)
flush_state()
local json = '{"status":"acquired","lease_id":"' .. id .. '","kind":"semaphore","reentry_count":'
  .. A(6) .. ',"fencing_token":' .. fence .. ',"ttl_ms":' .. ttl .. ',"now_ms":' .. NOW_S
  .. ',"now_us":' .. NOW_US_S .. ',"created_ms":' .. NOW_S .. ',"available":'
  .. d(available - wanted) .. ',"holder":' .. jsn(A(3)) .. ev(events) .. '}'
if idem ~= '' then idem_store(idem, fp, json, id, sealed, tonumber(ttl) + TOMB) end
return json
