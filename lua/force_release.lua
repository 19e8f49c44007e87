-- Admin force release: remove every holder of a lock of any kind (Leasehold leases and
-- Redisson clients alike), as Redisson's forceUnlock does, and wake waiters (the fair queue's
-- head, or everyone). Each removed Leasehold lease is marked force_released, so its holder's
-- next call gets 410. Queued fair waiters keep their places. A lock-delay the holder asked
-- for runs from now (locklib.lua); a name nobody holds that is in its lock-delay is freed:
-- the delay is lifted (an admin's way to let a name go before its delay ends). A key some
-- other program made is left alone. KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) by: who asked (for the history)
-- A(2) reason: why (free text, "" for none)
-- A(3) nonce: this request's nonce: the same call run again finds its history entry, which
--       keeps it, and answers as it did, removing nobody else (see "Run twice" in prelude.lua)
-- Returns: JSON {status = force_released | delay_lifted | not_held | kind_conflict (held_as)
--   | too_late,
--   holders = [{holder_id, reentry_count, lease_id?, holder?, kind?, fencing_token?,
--   since_ms?}]}, and in `ev` the history entry, which names every holder removed.
if not lock_begin(KEYS, ARGV) then return TOO_LATE end
local nonce = A(3) or ''
local again = entry_by(nonce)
if again then
  if cjson.decode(again).type == 'delay_lifted' then
    return '{"status":"delay_lifted","ev":[' .. again .. ']}'
  end
  return removed_again(again)
end
local t = redis.call('TYPE', L).ok
if t == 'none' then
  if not delay_left() then return '{"status":"not_held"}' end
  local _, st = load('')
  redis.call('DEL', delay_key())
  -- Waiters parked for the delay's end may take the name now.
  wake_next(st.q, nil, st.hexp)
  local entry = encode({type = 'delay_lifted', at_ms = NOW, by = A(1), reason = A(2)})
  append_history(entry, st.hexp, nonce)
  return '{"status":"delay_lifted","ev":[' .. entry .. ']}'
end
local _, st = load('')
if t ~= 'hash' or not lock_shaped() then
  local as = held_as(st, false)
  if as == 'semaphore' or as == 'idle_semaphore' then as = 'semaphore' else as = 'foreign' end
  return '{"status":"kind_conflict","held_as":"' .. as .. '"}'
end
local rw = redis.call('HEXISTS', L, 'mode') == 1
local flat = redis.call('HGETALL', L)
local by_holder, order = {}, {}
for i = 1, #flat, 2 do
  local field, count = flat[i], tonumber(flat[i + 1])
  if field ~= 'mode' then
    local base = string.match(field, '^(.*):write$') or field
    if rw and not string.find(field, ':write$') then
      for n = 1, count do redis.call('DEL', rw_timeout_key(field, n)) end
    end
    if not by_holder[base] then
      by_holder[base] = {holder_id = base, reentry_count = 0}
      order[#order + 1] = base
    end
    by_holder[base].reentry_count = by_holder[base].reentry_count + count
  end
end
local removed, lease_ids = {}, {}
for _, base in ipairs(order) do
  local entry = by_holder[base]
  local id = string.match(base, '^(.*):1$')
  local rec = id and load(id)
  if rec and rec.state == 'held' then
    entry.lease_id = id
    entry.holder = rec.holder
    entry.kind = rec.kind
    entry.fencing_token = tonumber(rec.fence)
    entry.since_ms = tonumber(rec.since)
    lease_ids[#lease_ids + 1] = id
    rec.state, rec.ended, rec.nonce = 'force_released', NOW_S, ''
    save(rec)
  end
  removed[#removed + 1] = entry
end
redis.call('DEL', L)
delay_from_now()
wake_next(st.q, nil, st.hexp)
redis.call(PUBLISH, rw_channel(), '0')
local entry = encode({type = 'force_released', at_ms = NOW, lease_ids = lease_ids,
  holder_ids = order, holders = removed, by = A(1), reason = A(2)})
append_history(entry, st.hexp, nonce)
return '{"status":"force_released","holders":' .. encode(removed) .. ',"ev":[' .. entry .. ']}'
