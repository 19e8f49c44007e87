-- Admin force release: remove every holder of a lock (Leasehold leases and Redisson clients
-- alike), as Redisson's forceUnlock does, wake all waiters, and mark each Leasehold lease
-- force_released so its holder's next call gets 410.
-- KEYS[1]: the lock hash (L)
-- KEYS[2]: the lease key prefix ({L}:leasehold:lease:)
-- KEYS[3]: the token key prefix ({L}:leasehold:token:)
-- KEYS[4]: Redisson's unlock channel (redisson_lock__channel:{L})
-- ARGV[1]: lock name as the API shows it (for events)
-- ARGV[2]: events channel
-- ARGV[3]: how long a lease stays answerable after it ends (ms)
-- ARGV[4]: who asked (for the event)
-- ARGV[5]: why (free text, "" for none)
-- Returns: JSON {status = force_released | not_held,
--   holders = [{holder_id, reentry_count, lease_id?, holder?, fencing_token?, created_ms?}]}
local tomb = tonumber(ARGV[3])
local flat = redis.call('HGETALL', KEYS[1])
if #flat == 0 then return cjson.encode({status = 'not_held'}) end

local removed = {}
local fields = {}
local lease_ids = {}
for i = 1, #flat, 2 do
  local field = flat[i]
  fields[#fields + 1] = field
  local entry = {holder_id = field, reentry_count = tonumber(flat[i + 1])}
  local id = string.match(field, '^(.*):1$')
  if id then
    local lkey = KEYS[2] .. id
    local rec = redis.call('HMGET', lkey, 'holder', 'token_sha256', 'fencing_token', 'created_ms')
    if rec[2] then
      entry.lease_id = id
      entry.holder = rec[1]
      entry.fencing_token = tonumber(rec[3])
      entry.created_ms = tonumber(rec[4])
      lease_ids[#lease_ids + 1] = id
      redis.call('HSET', lkey, 'state', 'force_released', 'ended_ms', NOW)
      redis.call('PEXPIRE', lkey, tomb)
      redis.call('PEXPIRE', KEYS[3] .. rec[2], tomb)
    end
  end
  removed[#removed + 1] = entry
end

redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[4], 0)
publish_event(ARGV[2], ARGV[1], {type = 'force_released', lease_ids = lease_ids,
  holder_ids = fields, by = ARGV[4], reason = ARGV[5]})
return cjson.encode({status = 'force_released', holders = removed})
