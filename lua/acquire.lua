-- Acquire a reentrant lock with Redisson's RLock layout, or re-enter it with a lease token.
-- The lock hash holds one field per holder, "<lease-id>:1" = reentry count, with PEXPIRE = the
-- lease TTL, exactly as Redisson writes it, so Redisson clients and Leasehold exclude each other.
-- Lease records live beside it under the lock's hash tag ({L}:leasehold:...), so the script
-- stays in one cluster slot; the record of a re-entered lease is addressed from the KEYS[3]
-- prefix, as Redisson addresses its rwlock_timeout keys (same hash tag, same slot).
-- KEYS[1]: the lock hash (L)
-- KEYS[2]: the lock's state hash ({L}:leasehold): fence = fencing counter, lease = last lease id
-- KEYS[3]: the lease key prefix ({L}:leasehold:lease:)
-- KEYS[4]: the token key ({L}:leasehold:token:<sha256 hex of the new or presented token>)
-- ARGV[1]: ttl (ms); "0" on reentry keeps the lease's own TTL
-- ARGV[2]: "new" or "reenter"
-- ARGV[3]: the new lease id (ignored on reentry)
-- ARGV[4]: sha256 hex of the new token (ignored on reentry: KEYS[4] names the presented one)
-- ARGV[5]: holder label ("" for none)
-- ARGV[6]: metadata as JSON text ("" for none)
-- ARGV[7]: lock name as the API shows it (for events)
-- ARGV[8]: events channel
-- ARGV[9]: how long a lease stays answerable after it ends (ms)
-- Returns: JSON with status = acquired | reentered | held | lease_lost | unknown_token
local tomb = tonumber(ARGV[9])

if ARGV[2] == 'reenter' then
  local lease_id = redis.call('GET', KEYS[4])
  if not lease_id then return cjson.encode({status = 'unknown_token'}) end
  local lkey = KEYS[3] .. lease_id
  local field = lease_id .. ':1'
  if redis.call('HEXISTS', KEYS[1], field) == 0 then
    local state = observe_expiry(lkey, lease_id, ARGV[7], ARGV[8], tomb)
    return cjson.encode({status = 'lease_lost', lease_id = lease_id, state = state})
  end
  local ttl = tonumber(ARGV[1])
  if ttl == 0 then ttl = tonumber(redis.call('HGET', lkey, 'ttl_ms')) end
  local count = redis.call('HINCRBY', KEYS[1], field, 1)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('HSET', lkey, 'ttl_ms', ttl, 'expires_ms', NOW + ttl)
  redis.call('PEXPIRE', lkey, ttl + tomb)
  redis.call('PEXPIRE', KEYS[4], ttl + tomb)
  local rec = redis.call('HMGET', lkey, 'holder', 'fencing_token', 'created_ms')
  publish_event(ARGV[8], ARGV[7], {type = 'reentered', lease_id = lease_id, holder = rec[1],
    reentry_count = count, fencing_token = tonumber(rec[2]), ttl_ms = ttl})
  return cjson.encode({status = 'reentered', lease_id = lease_id, holder = rec[1],
    reentry_count = count, fencing_token = tonumber(rec[2]), ttl_ms = ttl, now_ms = NOW,
    created_ms = tonumber(rec[3])})
end

if redis.call('EXISTS', KEYS[1]) == 1 then
  -- Held by someone else (a Leasehold lease or a Redisson client): say who, and for how long.
  local field = redis.call('HKEYS', KEYS[1])[1]
  local holder, lease_id
  local id = field and string.match(field, '^(.*):1$')
  if id then
    holder = redis.call('HGET', KEYS[3] .. id, 'holder') or nil
    if holder then lease_id = id end
  end
  return cjson.encode({status = 'held', pttl = redis.call('PTTL', KEYS[1]), holder_id = field,
    lease_id = lease_id, holder = holder})
end

local previous = redis.call('HGET', KEYS[2], 'lease')
if previous then observe_expiry(KEYS[3] .. previous, previous, ARGV[7], ARGV[8], tomb) end

local ttl = tonumber(ARGV[1])
local lease_id = ARGV[3]
local lkey = KEYS[3] .. lease_id
local fence = redis.call('HINCRBY', KEYS[2], 'fence', 1)
redis.call('HSET', KEYS[2], 'lease', lease_id)
redis.call('HSET', KEYS[1], lease_id .. ':1', 1)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('HSET', lkey, 'state', 'held', 'holder', ARGV[5], 'metadata', ARGV[6],
  'token_sha256', ARGV[4], 'fencing_token', fence, 'ttl_ms', ttl, 'created_ms', NOW,
  'expires_ms', NOW + ttl)
redis.call('PEXPIRE', lkey, ttl + tomb)
redis.call('SET', KEYS[4], lease_id, 'PX', ttl + tomb)
publish_event(ARGV[8], ARGV[7], {type = 'acquired', lease_id = lease_id, holder = ARGV[5],
  reentry_count = 1, fencing_token = fence, ttl_ms = ttl})
return cjson.encode({status = 'acquired', lease_id = lease_id, holder = ARGV[5],
  reentry_count = 1, fencing_token = fence, ttl_ms = ttl, now_ms = NOW, created_ms = NOW})
