-- Cooperative revocation: an admin asks lease A(1)'s holder to let go within A(2) ms. The
-- lease stays held: the request is recorded in {L}:leasehold:revoke (lease id -> JSON
-- {reason, by, at_ms, deadline_ms}), which expires a while after its latest deadline, so a
-- lease that ends needs no clean-up here. From then on a heartbeat extends the lease no
-- further than the deadline (renew.lua, semaphore_renew.lua), the lease's watches are woken
-- on the lock's watch channel and tell the holder, and at the deadline the revocation sweeper
-- (Rust: leases::revocation) evicts the lease, unless it ended first. A revocation is never
-- put off: asked again, the earlier deadline stands (and the reason given first).
-- KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) lease_id: lease id
-- A(2) grace_ms: how long the holder has to release (ms)
-- A(3) by: who asked (for the history)
-- A(4) reason: why (free text, "" for none)
-- A(5) resource: "semaphore" for a semaphore's lease, "" for a lock's
-- Returns: JSON {status = revocation_requested | not_held | too_late, revocation = the record,
--   again = true when it was pending already, holder, fencing_token, kind}; in `ev` the
--   history entry (and expiries noticed).
if not lock_begin(KEYS, ARGV) then return TOO_LATE end
local id, grace = A(1), tonumber(A(2))
local semaphore = A(5) == 'semaphore'
local events = {}
local rec, st
if semaphore then
  semaphore_begin(KEYS, ARGV)
  rec, st = load(id, false, true)
  if not check_permits(id, rec, st.hexp, events) then
    return '{"status":"not_held"' .. ev(events) .. '}'
  end
else
  rec, st = load(id)
  if not rec or rec.kind == 'semaphore' or not check_held(id, rec, st.hexp, events) then
    return '{"status":"not_held"' .. ev(events) .. '}'
  end
end
local tail = ',"holder":' .. jsn(rec.holder) .. ',"fencing_token":' .. jt(rec.fence)
  .. ',"kind":' .. js(rec.kind)
local pending = revocation_of(id)
if pending then
  return '{"status":"revocation_requested","again":true,"revocation":' .. pending .. tail
    .. ev(events) .. '}'
end
local deadline = NOW + grace
local record = encode({reason = A(4), by = A(3), at_ms = NOW, deadline_ms = deadline})
local key = revoke_key()
redis.call('HSET', key, id, record)
-- The key outlives its latest deadline by the tombstone time: a watch that reads the lease
-- after it was revoked still finds why.
local keep = deadline + tonumber(TOMB)
if redis.call('PEXPIRETIME', key) < keep then redis.call('PEXPIREAT', key, d(keep)) end
local entry = encode({type = 'revocation_requested', at_ms = NOW, lease_id = id,
  holder = rec.holder, kind = rec.kind, by = A(3), reason = A(4), deadline_ms = deadline})
append_history(entry, st.hexp)
events[#events + 1] = entry
redis.call(PUBLISH, watch_channel(), '0')
return '{"status":"revocation_requested","again":false,"revocation":' .. record .. tail
  .. ev(events) .. '}'
