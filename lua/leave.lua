-- A waiter gives up its place: a fair queue ticket (its request ended, or DELETE on the
-- ticket) or a waiting writer. When the fair queue's head leaves a free lock, the next waiter
-- is woken. KEYS: see locklib.lua. ARGV[1..4]: see prelude.lua.
-- ARGV[5]: the waiter's lease id
-- ARGV[6]: sha256 hex of its token
-- Returns: JSON with status = left | not_queued | forbidden | unknown_lease
local id = ARGV[5]
if redis.call('ZREM', writers_key(), id) == 1 then
  redis.call('ZREM', writers_key() .. ':until', id)
  -- Readers that queued behind this writer (fifo policy) may go now.
  redis.call('PUBLISH', RW_CHANNEL, 0)
end
local ticket = read_lease(TAG, id)
if not ticket then return encode({status = 'unknown_lease'}) end
if not same_digest(ticket.digest, ARGV[6]) then return encode({status = 'forbidden'}) end
if ticket.state ~= 'queued' then return encode({status = 'not_queued', state = ticket.state}) end
local field = holder_id(id)
local was_head = redis.call('LINDEX', QUEUE, 0) == field
redis.call('LREM', QUEUE, 0, field)
redis.call('ZREM', TIMEOUTS, field)
end_lease(ticket, 'left')
publish_event({type = 'left', lease_id = id, holder = ticket.holder})
if was_head and redis.call('EXISTS', L) == 0 then wake_next() end
return encode({status = 'left'})
