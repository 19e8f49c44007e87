-- Read one lease's state without its token: held (with its reentry count and time left), or
-- how it ended. Changes nothing.
-- KEYS[1]: the lock hash (L)
-- KEYS[2]: the lease key ({L}:leasehold:lease:<lease-id>)
-- ARGV[1]: lease id
-- Returns: JSON {found, state, holder, metadata, fencing_token, ttl_ms, created_ms, expires_ms,
--   ended_ms, reentry_count, pttl, now_ms}
local rec = redis.call('HMGET', KEYS[2], 'state', 'holder', 'metadata', 'fencing_token',
  'ttl_ms', 'created_ms', 'expires_ms', 'ended_ms')
if not rec[1] then return cjson.encode({found = false}) end
local count = tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. ':1') or 0)
local state = rec[1]
local ended = tonumber(rec[8])
if state == 'held' and count == 0 then
  state = 'expired'
  ended = tonumber(rec[7])
end
return cjson.encode({found = true, state = state, holder = rec[2], metadata = rec[3],
  fencing_token = tonumber(rec[4]), ttl_ms = tonumber(rec[5]), created_ms = tonumber(rec[6]),
  expires_ms = tonumber(rec[7]), ended_ms = ended, reentry_count = count,
  pttl = redis.call('PTTL', KEYS[1]), now_ms = NOW})
