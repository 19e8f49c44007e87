-- Take permits of a semaphore for a new lease (Redisson RPermitExpirableSemaphore layout;
-- each lease's permits expire on their own). The first acquirer sets the limit (as Redisson's
-- trySetPermits); later ones must name the same. KEYS: see semlib.lua. ARGV[1..3]: see
-- prelude.lua.
-- ARGV[5]: ttl (ms)
-- ARGV[6]: the new lease id
-- ARGV[7]: sha256 hex of the new token
-- ARGV[8]: holder label ("" for none)
-- ARGV[9]: metadata as JSON text ("" for none)
-- ARGV[10]: the limit the caller expects
-- ARGV[11]: permits wanted
-- ARGV[12]: this request's nonce (see acquire.lua)
-- ARGV[13]: sha256 hex of the request's Idempotency-Key, or ""
-- ARGV[14]: sha256 hex of what the request asks
-- ARGV[15]: the new token sealed under the Idempotency-Key (hex), or ""
-- Returns: JSON with status = acquired | held (with pttl: when the next permit expires) |
--   limit_mismatch | kind_conflict | lease_lost | idempotency_mismatch; a retried key's
--   answer carries replayed = true and sealed
local ttl, id, digest = tonumber(ARGV[5]), ARGV[6], ARGV[7]
local limit, wanted = tonumber(ARGV[10]), tonumber(ARGV[11])
local nonce, idem, fp, sealed = ARGV[12], ARGV[13], ARGV[14], ARGV[15]

local first, first_lease, first_sealed = idem_find(TAG, idem, fp)
if first == 'mismatch' then return encode({status = 'idempotency_mismatch'}) end
if first then
  local lease = first_lease ~= '' and read_lease(TAG, first_lease)
  if lease then
    if not permits_held(lease) then
      return encode({status = 'lease_lost', state = lease.state == 'held' and 'expired' or lease.state})
    end
    redis.call('HSET', lease.key, 'grant_nonce', '')
  end
  return idem_replay(first, first_sealed)
end

local use = name_use()
if use ~= 'semaphore' and use ~= 'none' then
  return encode({status = 'kind_conflict', held_as = use})
end
reclaim_expired()
local known
if use == 'none' then
  -- Redisson's trySetPermits: the counter starts at the limit, minus permits still held.
  redis.call('SET', S, limit - live_permits())
  redis.call('HSET', STATE, 'limit', limit)
  known = limit
else
  known = limit_of()
  if known == limit then redis.call('HSET', STATE, 'limit', limit) end
end
if known ~= limit then
  return encode({status = 'limit_mismatch', limit = known})
end

local available = tonumber(redis.call('GET', S))
if available < wanted then
  local next_free = redis.call('ZRANGEBYSCORE', TIMEOUT, '(' .. NOW, '+inf', 'WITHSCORES',
    'LIMIT', 0, 1)
  local pttl = next_free[2] and (tonumber(next_free[2]) - NOW) or -1
  return encode({status = 'held', pttl = pttl, available = available})
end
redis.call('DECRBY', S, wanted)
local expiry = NOW + ttl
local args = {}
for _, pid in ipairs(permit_ids(id, wanted)) do
  args[#args + 1] = expiry
  args[#args + 1] = pid
end
chunked('ZADD', TIMEOUT, {}, args)
redis.call('ZADD', HOLDERS, expiry, id)
local fence = next_fence(STATE)
create_lease(TAG, id, {state = 'held', kind = 'semaphore', holder = ARGV[8], metadata = ARGV[9],
  fencing_token = fence, ttl_ms = ttl, expires_ms = expiry, acquired_ms = NOW,
  permits = wanted, grant_nonce = nonce}, digest, ttl + TOMB)
publish_event({type = 'acquired', lease_id = id, holder = ARGV[8], kind = 'semaphore',
  permits = wanted, fencing_token = fence, ttl_ms = ttl})
local json = encode({status = 'acquired', lease_id = id, holder = ARGV[8], kind = 'semaphore',
  reentry_count = wanted, fencing_token = fence, ttl_ms = ttl, now_ms = NOW, created_ms = NOW,
  available = available - wanted})
idem_store(TAG, idem, fp, json, id, sealed, ttl + TOMB)
return json
