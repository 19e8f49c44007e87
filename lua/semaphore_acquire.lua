-- Take permits of a semaphore for a new lease (Redisson RPermitExpirableSemaphore layout; each
-- lease's permits expire on their own). The first acquirer sets the limit; later ones must
-- name the same. KEYS: see semlib.lua.
-- ARGV[1]: ttl (ms)
-- ARGV[2]: the new lease id
-- ARGV[3]: sha256 hex of the new token
-- ARGV[4]: holder label ("" for none)
-- ARGV[5]: metadata as JSON text ("" for none)
-- ARGV[6]: semaphore name as the API shows it (for events)
-- ARGV[7]: events channel
-- ARGV[8]: how long an ended lease stays answerable (ms)
-- ARGV[9]: the limit the caller expects
-- ARGV[10]: permits wanted
-- Returns: JSON with status = acquired | held (with pttl: when the next permit expires) |
--   limit_mismatch | kind_conflict
local ttl, id, digest = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local name, events, tomb = ARGV[6], ARGV[7], tonumber(ARGV[8])
local limit, wanted = tonumber(ARGV[9]), tonumber(ARGV[10])

local t = redis.call('TYPE', S).ok
if t ~= 'none' and t ~= 'string' then
  return cjson.encode({status = 'kind_conflict', held_as = (t == 'hash') and 'lock' or t})
end
local known = tonumber(redis.call('HGET', STATE, 'limit'))
if known and known ~= limit then
  return cjson.encode({status = 'limit_mismatch', limit = known})
end
reclaim_expired(name, events, tomb)
if t == 'none' then
  -- Redisson's trySetPermits: the counter starts at the limit, minus permits still held.
  redis.call('SET', S, limit - redis.call('ZCARD', PERMITS), 'NX')
end
if not known then redis.call('HSET', STATE, 'limit', limit) end

local available = tonumber(redis.call('GET', S))
if available < wanted then
  local next_free = redis.call('ZRANGE', PERMITS, 0, 0, 'WITHSCORES')
  local pttl = next_free[2] and (tonumber(next_free[2]) - NOW) or -1
  return cjson.encode({status = 'held', pttl = pttl, available = available})
end
redis.call('DECRBY', S, wanted)
for i = 1, wanted do redis.call('ZADD', PERMITS, NOW + ttl, permit_id(id, i)) end
local fence = redis.call('HINCRBY', STATE, 'fence', 1)
create_lease(TAG, id, {state = 'held', kind = 'semaphore', holder = ARGV[4], metadata = ARGV[5],
  fencing_token = fence, ttl_ms = ttl, expires_ms = NOW + ttl, permits = wanted}, digest, ttl + tomb)
publish_event(events, name, {type = 'acquired', lease_id = id, holder = ARGV[4],
  kind = 'semaphore', permits = wanted, fencing_token = fence, ttl_ms = ttl})
return cjson.encode({status = 'acquired', lease_id = id, holder = ARGV[4], kind = 'semaphore',
  reentry_count = wanted, fencing_token = fence, ttl_ms = ttl, now_ms = NOW, created_ms = NOW,
  available = available - wanted})
