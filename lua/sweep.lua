-- Record the leases of a lock or semaphore whose time ran out with nobody looking, each as
-- `expired` at the time it ran out (exactly what the next call on the name would record),
-- so the history and the live events show an expiry when it happens. Run by the instances'
-- sweepers on a key expiry or a periodic pass; atomic, so however many instances sweep one
-- name, each expiry is recorded once. Changes nothing else but what any call does first
-- (dead read holds pruned, expired permits returned to the semaphore).
-- KEYS, ARGV[1..2]: see prelude.lua. No more ARGV.
-- Returns: JSON {status = swept | too_late, expired = n}, and in `ev` the entries recorded.
if not lock_begin(KEYS, ARGV) then return TOO_LATE end
if redis.call('EXISTS', STATE) == 0 then return '{"status":"swept","expired":0}' end
local events = {}
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
