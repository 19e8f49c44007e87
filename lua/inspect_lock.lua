-- Read a lock's state in one snapshot: its holders (Leasehold leases and Redisson clients), the
-- time left and the fencing counter. Changes nothing.
-- KEYS[1]: the lock hash (L)
-- KEYS[2]: the lock's state hash ({L}:leasehold)
-- KEYS[3]: the lease key prefix ({L}:leasehold:lease:)
-- Returns: JSON {known, fence, pttl, holders = [{holder_id, reentry_count, lease_id?, holder?,
--   metadata?, fencing_token?, created_ms?}], now_ms}
local holders = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  local entry = {holder_id = flat[i], reentry_count = tonumber(flat[i + 1])}
  local id = string.match(flat[i], '^(.*):1$')
  if id then
    local rec = redis.call('HMGET', KEYS[3] .. id, 'holder', 'metadata', 'fencing_token',
      'created_ms')
    if rec[3] then
      entry.lease_id = id
      entry.holder = rec[1]
      entry.metadata = rec[2]
      entry.fencing_token = tonumber(rec[3])
      entry.created_ms = tonumber(rec[4])
    end
  end
  holders[#holders + 1] = entry
end
local fence = redis.call('HGET', KEYS[2], 'fence')
return cjson.encode({known = (fence ~= false) or (#holders > 0), fence = tonumber(fence or 0),
  pttl = redis.call('PTTL', KEYS[1]), holders = holders, now_ms = NOW})
