-- Admin eviction of one lease: remove lease A(1) (every level it holds: reentries, read and
-- write holds, or all the permits of a semaphore lease) and leave the other holders alone,
-- as force_release.lua does for all of them: waiters wake, the lease is marked force_released
-- (its holder's next call gets 410) and the history entry (type force_released, with
-- `lease_ids` and `holders` naming the one lease and `scope` = "lease") says who and why.
-- KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) lease_id: lease id
-- A(2) by: who asked (for the history)
-- A(3) reason: why (free text, "" for none)
-- A(4) resource: "semaphore" for a semaphore's lease, "" for a lock's
-- A(5) nonce: this request's nonce: the same call run again finds its history entry, which
--       keeps it, and answers as it did (see "Run twice" in prelude.lua)
-- A(6) not_before: a revocation's deadline (ms, Redis's clock; "" for an admin's eviction):
--       before it, nothing is removed. The holder was promised the lease until then, and the
--       instance that keeps the deadline wakes by its own estimate of Redis's clock, which a
--       frozen Redis can put tens of ms ahead (the safety harness's redis-freeze fault).
-- Returns: JSON {status = force_released | not_held | too_late | too_early, holders = [the
--   lease], wait_ms (too_early: how long until not_before)}, and in `ev` the history entry.
--   not_held: the lease does not hold this lock (or semaphore).
if not lock_begin(KEYS, ARGV) then return TOO_LATE end
local id, nonce = A(1), A(5) or ''
local again = entry_by(nonce)
if again then return removed_again(again) end
local not_before = tonumber(A(6) or '')
if not_before and NOW < not_before then
  return '{"status":"too_early","wait_ms":' .. d(not_before - NOW) .. '}'
end
local rec, st = load(id)
if not rec or rec.state ~= 'held' then return '{"status":"not_held"}' end
local semaphore = A(4) == 'semaphore'
if semaphore ~= (rec.kind == 'semaphore') then return '{"status":"not_held"}' end
local removed = {holder_id = holder_id(id), lease_id = id, holder = rec.holder, kind = rec.kind,
  fencing_token = tonumber(rec.fence), since_ms = tonumber(rec.since)}
if semaphore then
  semaphore_begin(KEYS, ARGV)
  local n = tonumber(rec.permits) or 0
  local back = chunked('ZREM', TIMEOUT, {}, permit_ids(id, n))
  redis.call('ZREM', HOLDERS, id)
  if back > 0 then
    local available = redis.call('INCRBY', L, d(back))
    if available > 0 then redis.call(PUBLISH, SEM_CHANNEL, d(available)) end
  end
  removed.holder_id, removed.reentry_count, removed.permits = id, n, n
else
  local h = holder_id(id)
  local reads, writes = held_levels(rec)
  if reads + writes == 0 then return '{"status":"not_held"}' end
  if is_rw(rec.kind) then
    for n = 1, reads do redis.call('DEL', rw_timeout_key(h, n)) end
    redis.call('HDEL', L, h, h .. ':write')
    -- Only `mode` left: nobody holds the lock any more (its lock-delay runs from now).
    if redis.call('HLEN', L) <= 1 then
      redis.call('DEL', L)
      delay_from_now()
    end
    redis.call(PUBLISH, rw_channel(), '0')
  else
    redis.call('HDEL', L, h)
    -- (Its one holder gone, the lock is free: its lock-delay runs from now.)
    delay_from_now()
    wake_next(st.q, nil, st.hexp)
  end
  removed.reentry_count = reads + writes
end
rec.state, rec.ended, rec.nonce = 'force_released', NOW_S, ''
save(rec)
local entry = encode({type = 'force_released', at_ms = NOW, lease_ids = {id},
  holder_ids = {removed.holder_id}, holders = {removed}, by = A(2), reason = A(3),
  scope = 'lease'})
append_history(entry, st.hexp, nonce)
return '{"status":"force_released","holders":' .. encode({removed}) .. ',"ev":[' .. entry .. ']}'
