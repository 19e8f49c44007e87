-- Admin force release of a semaphore: every permit comes back (Redisson clients' too),
-- waiters wake, and each removed lease is marked force_released (its holder's next call gets
-- 410). With "clear", the semaphore itself goes as well (its counter and limit): the next
-- acquirer sets a new limit, and the name can be used as a lock. KEYS, ARGV[1..2]: see
-- prelude.lua. Then:
-- A(1) by: who asked (for the history)
-- A(2) reason: why (free text, "" for none)
-- A(3) clear: "clear" to remove the semaphore, "" to return its permits
-- A(4) nonce: this request's nonce: the same call run again finds its history entry, which
--       keeps it, and answers as it did, removing nobody else (see "Run twice" in prelude.lua)
-- Returns: JSON {status = force_released | not_held | kind_conflict (held_as) | too_late,
--   holders = [{holder_id, reentry_count, lease_id?, holder?, fencing_token?, since_ms?}]},
--   and in `ev` the history entry, which names every holder removed
if not semaphore_begin(KEYS, ARGV) then return TOO_LATE end
local clear, nonce = A(3) == 'clear', A(4) or ''
local again = entry_by(nonce)
if again then return removed_again(again) end
local _, st = load('', true)
local use = name_use(st)
if use == 'none' then return '{"status":"not_held"}' end
if use ~= 'semaphore' then return '{"status":"kind_conflict","held_as":"' .. use .. '"}' end
local members = redis.call('ZCARD', TIMEOUT)
local live = live_permits()
local removed, ids, ours = {}, {}, 0
for _, id in ipairs(redis.call('ZRANGE', HOLDERS, 0, -1)) do
  local rec = load(id)
  if rec and rec.state == 'held' then
    removed[#removed + 1] = {holder_id = id, lease_id = id, holder = rec.holder,
      kind = 'semaphore', reentry_count = tonumber(rec.permits), permits = tonumber(rec.permits),
      fencing_token = tonumber(rec.fence), since_ms = tonumber(rec.since)}
    ids[#ids + 1] = id
    ours = ours + (tonumber(rec.permits) or 0)
    rec.state, rec.ended = 'force_released', NOW_S
    save(rec)
  end
end
if live > ours then
  removed[#removed + 1] = {holder_id = 'redisson', reentry_count = live - ours}
end
if #removed == 0 and not clear then return '{"status":"not_held"}' end
redis.call('DEL', TIMEOUT, HOLDERS)
if clear then
  redis.call('DEL', L)
  redis.call('HDEL', STATE, 'limit')
  redis.call(PUBLISH, SEM_CHANNEL, '0')
else
  local available = redis.call('INCRBY', L, d(members))
  if available > 0 then redis.call(PUBLISH, SEM_CHANNEL, d(available)) end
end
local entry = encode({type = 'force_released', at_ms = NOW, lease_ids = ids, holders = removed,
  by = A(1), reason = A(2), cleared = clear})
append_history(entry, st.hexp, nonce)
flush_state()
return '{"status":"force_released","holders":' .. encode(removed) .. ',"ev":[' .. entry .. ']}'
