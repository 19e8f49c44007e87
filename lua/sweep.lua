-- Record the leases of a lock or semaphore whose time ran out with nobody looking, each as
-- `expired` at the time it ran out (exactly what the next call on the name would record),
-- so the history and the live events show an expiry when it happens. Run by the instances'
-- sweepers on a key expiry or a periodic pass; atomic, so however many instances sweep one
-- name, each expiry is recorded once. Changes nothing else but what any call does first
-- (dead read holds pruned, expired permits returned to the semaphore), except that a
-- semaphore Leasehold made ends once it has had no permit out for the tombstone time: its
-- counter and limit go (the next acquirer sets a new limit) and its state expires as a
-- lock's does, so a name nobody uses any more keeps nothing in Redis.
-- KEYS, ARGV[1..2]: see prelude.lua. No more ARGV.
-- Returns: JSON {status = swept | too_late, expired = n}, and in `ev` the entries recorded.
if not lock_begin(KEYS, ARGV) then return TOO_LATE end
if redis.call('EXISTS', STATE) == 0 then return '{"status":"swept","expired":0}' end
local events = {}
-- A semaphore Leasehold made (its limit is recorded) with no permit out (Redisson's zset of
-- permits is gone) and no entry in its history for the tombstone time: retired.
local limit = redis.call('HGET', STATE, 'limit')
if limit and redis.call('EXISTS', tag() .. ':timeout') == 0
  and redis.call('TYPE', L).ok == 'string' then
  local last = redis.call('XREVRANGE', history_key(), '+', '-', 'COUNT', 1)[1]
  local last_ms = last and tonumber(string.match(last[1], '^(%d+)')) or 0
  if NOW - last_ms >= TOMB + 0 then
    redis.call('DEL', L)
    redis.call('HDEL', STATE, 'limit', 'sexp')
    redis.call('PEXPIRE', STATE, TOMB + STATE_SLACK_MS)
  end
  return '{"status":"swept","expired":0}'
end
if redis.call('EXISTS', tag() .. ':leasehold:holders') == 1 then
  semaphore_begin(KEYS, ARGV)
  local _, st = load('')
  reclaim_expired(events, st.hexp)
else
  local _, st = load('')
  local cur = current(st)
  if cur and cur.state == 'held' and not is_rw(cur.kind) then
    local reads, writes = held_levels(cur)
    if reads + writes == 0 then observe_expiry(cur, st.hexp, events) end
  end
  prune_dead_readers(events, st.hexp)
  -- Fair tickets at the head of the queue that were not polled in time: recorded expired and
  -- dropped, so an abandoned ticket is not listed as waiting until someone takes the lock.
  if st.q then prune_queue(events, st.hexp) end
  for _, field in ipairs(redis.call('HKEYS', STATE)) do
    local id = string.match(field, '^r:(.+)$')
    local rec = id and load(id)
    if rec and rec.state == 'held' and is_rw(rec.kind) then
      local reads, writes = held_levels(rec)
      if reads + writes == 0 then observe_expiry(rec, st.hexp, events) end
    end
  end
end
return '{"status":"swept","expired":' .. #events .. ev(events) .. '}'
