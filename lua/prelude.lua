-- Helpers shared by every script; scripts.rs puts this file in front of each script's text.
-- Time comes from Redis so that every Leasehold instance uses one clock.
local _time = redis.call('TIME')
local NOW = tonumber(_time[1]) * 1000 + math.floor(tonumber(_time[2]) / 1000)

-- Publishes one dashboard event (JSON) describing a change this script made.
local function publish_event(channel, lock_name, fields)
  fields.lock = lock_name
  fields.at_ms = NOW
  redis.call('PUBLISH', channel, cjson.encode(fields))
end

-- Digests compared without an early exit, so timing says nothing about how much matched.
local function same_digest(a, b)
  if type(a) ~= 'string' or #a ~= #b then return false end
  local diff = 0
  for i = 1, #a do diff = bit.bor(diff, bit.bxor(string.byte(a, i), string.byte(b, i))) end
  return diff == 0
end

-- A lease whose lock field vanished while its record still says "held" ran out of TTL:
-- record that (keeping the record answerable for `tomb` ms) and return the lease's state.
local function observe_expiry(lease_key, lease_id, lock_name, channel, tomb)
  local rec = redis.call('HMGET', lease_key, 'state', 'expires_ms', 'holder')
  if rec[1] ~= 'held' then return rec[1] or nil end
  redis.call('HSET', lease_key, 'state', 'expired', 'ended_ms', rec[2])
  redis.call('PEXPIRE', lease_key, tomb)
  publish_event(channel, lock_name, {type = 'expired', lease_id = lease_id, holder = rec[3]})
  return 'expired'
end

-- Checks a presented token against a lease and that the lease still holds its lock.
-- Returns the lease record {ttl_ms, holder, fencing_token} and nil when the caller may act,
-- or nil and the JSON refusal to return.
local function authorize_lease(lock_key, lease_key, lease_id, digest, lock_name, channel, tomb)
  local rec = redis.call('HMGET', lease_key, 'token_sha256', 'ttl_ms', 'holder', 'fencing_token')
  if not rec[1] then return nil, cjson.encode({status = 'unknown_lease'}) end
  if not same_digest(rec[1], digest) then return nil, cjson.encode({status = 'forbidden'}) end
  if redis.call('HEXISTS', lock_key, lease_id .. ':1') == 0 then
    local state = observe_expiry(lease_key, lease_id, lock_name, channel, tomb)
    return nil, cjson.encode({status = 'lease_lost', state = state})
  end
  return {ttl_ms = tonumber(rec[2]), holder = rec[3], fencing_token = tonumber(rec[4])}, nil
end
