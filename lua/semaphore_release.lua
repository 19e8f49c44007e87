-- Give a semaphore lease's permits back and announce them on redisson_sc:{S} (the number now
-- available, as Redisson's release does), waking waiters. Also rolls back a grant whose
-- client went away (see release.lua). KEYS: see semlib.lua. ARGV[1..4]: see prelude.lua.
-- ARGV[5]: lease id
-- ARGV[6]: sha256 hex of the presented token
-- ARGV[7]: why: "released", or "client_gone" to roll back an undelivered grant
-- ARGV[8]: client_gone: the nonce of the request that made the grant
-- ARGV[9]: sha256 hex of the request's Idempotency-Key, or ""
-- ARGV[10]: sha256 hex of what the request asks
-- Returns: JSON with status = released | lease_lost | forbidden | unknown_lease |
--   not_rolled_back | idempotency_mismatch; released carries kind = semaphore and held_ms,
--   the lease's age (ms)
local reason, idem, fp = ARGV[7], ARGV[9], ARGV[10]
local first = idem_find(TAG, idem, fp)
if first == 'mismatch' then return encode({status = 'idempotency_mismatch'}) end
if first then return idem_replay(first, '') end

local lease, refusal = authorize_permits(ARGV[5], ARGV[6])
if refusal then return refusal end
if reason == 'client_gone' and (lease.nonce == '' or lease.nonce ~= ARGV[8]) then
  return encode({status = 'not_rolled_back'})
end
local freed = chunked('ZREM', TIMEOUT, {}, permit_ids(lease.id, lease.permits))
redis.call('ZREM', HOLDERS, lease.id)
local available = redis.call('INCRBY', S, freed)
if available > 0 then redis.call('PUBLISH', CHANNEL, available) end
end_lease(lease, 'released')
publish_event({type = 'released', lease_id = lease.id, holder = lease.holder,
  permits = lease.permits, reason = reason})
local json = encode({status = 'released', kind = 'semaphore',
  held_ms = NOW - (lease.acquired or NOW)})
idem_store(TAG, idem, fp, json, lease.id, '', TOMB)
return json
