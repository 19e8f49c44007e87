-- Semaphore helpers (after prelude.lua), in Redisson's RPermitExpirableSemaphore layout. Every
-- semaphore script receives the same KEYS:
-- KEYS[1]: the semaphore (S): a string holding the number of available permits
-- KEYS[2]: its state hash ({S}:leasehold): fence, limit
-- KEYS[3]: its hash tag ("{S}"): lease records and token index are built from it
-- KEYS[4]: redisson_sc:{S}: the zset of held permit ids -> expiry (ms), and (as a channel)
--          where freed permits are announced
-- A lease holding n permits holds the ids "<lease-id>:1" .. "<lease-id>:n".
local S, STATE, TAG, PERMITS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local function permit_id(id, i) return id .. ':' .. i end

-- Frees the permits of leases whose TTL ran out, records those leases as expired, and
-- announces the freed permits. Everyone's scripts do this, so no holder has to.
local function reclaim_expired(name, events, tomb)
  local expired = redis.call('ZRANGEBYSCORE', PERMITS, '-inf', NOW)
  if #expired == 0 then return end
  local seen = {}
  for _, pid in ipairs(expired) do
    redis.call('ZREM', PERMITS, pid)
    local id = string.match(pid, '^(.*):%d+$')
    if id and not seen[id] then
      seen[id] = true
      local lease = read_lease(TAG, id)
      if lease and lease.state == 'held' then
        end_lease(lease, 'expired', tomb, lease.expires)
        publish_event(events, name, {type = 'expired', lease_id = id, holder = lease.holder})
      end
    end
  end
  local available = redis.call('INCRBY', S, #expired)
  redis.call('PUBLISH', PERMITS, available)
end

-- Checks a presented token against a semaphore lease that still holds its permits.
-- Returns the lease, or nil and the JSON refusal to return.
local function authorize_permits(id, digest, name, events, tomb)
  reclaim_expired(name, events, tomb)
  local lease = read_lease(TAG, id)
  if not lease or lease.kind ~= 'semaphore' then
    return nil, cjson.encode({status = 'unknown_lease'})
  end
  if not same_digest(lease.digest, digest) then
    return nil, cjson.encode({status = 'forbidden'})
  end
  if lease.state ~= 'held' or not redis.call('ZSCORE', PERMITS, permit_id(id, 1)) then
    local state = lease.state
    if state == 'held' then
      end_lease(lease, 'expired', tomb, lease.expires)
      state = 'expired'
    end
    return nil, cjson.encode({status = 'lease_lost', state = state})
  end
  return lease, nil
end
