-- A waiter gives up its place: a fair queue ticket (its request ended, or DELETE on the
-- ticket) or a waiting writer. When the fair queue's head leaves a free lock, the next waiter
-- is woken. KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) lease_id: the waiter's lease id
-- A(2) proven: "1" when the presented token proves the lease id
-- A(3) nonce: this request's nonce: the same call run again finds the ticket's history entry,
--       which keeps it, and answers left again (see "Run twice" in prelude.lua)
-- Returns: JSON with status = left (with the ticket's history entry in `ev`) | not_queued |
--   forbidden | unknown_lease | too_late
if not lock_begin(KEYS, ARGV) then return TOO_LATE end
local id, proven, nonce = A(1), A(2) == '1', A(3) or ''
if proven and redis.call('ZREM', writers_key(), id) == 1 then
  redis.call('ZREM', writers_key() .. ':until', id)
  -- Readers that queued behind this writer (fifo policy) may go now.
  redis.call(PUBLISH, rw_channel(), '0')
end
local rec, st = load(id)
if not proven then return not_yours(id, rec) end
if not rec then
  local ended = find_ended(id)
  if ended and same_request(ended.by, nonce) then
    return '{"status":"left","ev":[' .. ended.json .. ']}'
  end
  if ended then return '{"status":"not_queued","state":"' .. ended.state .. '"}' end
  return '{"status":"unknown_lease"}'
end
if rec.state ~= 'queued' then
  return '{"status":"not_queued","state":"' .. rec.state .. '"}'
end
local field = holder_id(id)
local was_head = redis.call('LINDEX', queue_key(), 0) == field
redis.call('LREM', queue_key(), 0, field)
redis.call('ZREM', timeouts_key(), field)
local events = {finish(rec, 'left', st.hexp, nil, nil, nonce)}
if was_head and redis.call('EXISTS', L) == 0 then wake_next(st.q, events, st.hexp) end
return '{"status":"left"' .. ev(events) .. '}'
