-- Admin: give a semaphore another limit. The available count moves by the difference (as
-- Redisson's addPermits); with fewer permits than are out, it goes below zero and acquirers
-- wait until enough come back. KEYS: see semlib.lua. ARGV[1..4]: see prelude.lua.
-- ARGV[5]: the new limit
-- ARGV[6]: who asked (for the event)
-- Returns: JSON {status = changed (limit, previous, available) | not_found | kind_conflict}
local new = tonumber(ARGV[5])
local use = name_use()
if use == 'none' then return encode({status = 'not_found'}) end
if use ~= 'semaphore' then return encode({status = 'kind_conflict', held_as = use}) end
reclaim_expired()
local old = limit_of()
local available = redis.call('INCRBY', S, new - old)
redis.call('HSET', STATE, 'limit', new)
if new > old and available > 0 then redis.call('PUBLISH', CHANNEL, available) end
publish_event({type = 'limit_changed', previous = old, limit = new, by = ARGV[6]})
return encode({status = 'changed', limit = new, previous = old, available = available})
