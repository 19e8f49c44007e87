-- Admin: give a semaphore another limit. The available count moves by the difference (as
-- Redisson's addPermits); with fewer permits than are out, it goes below zero and acquirers
-- wait until enough come back. KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) limit: the new limit
-- A(2) by: who asked (for the history)
-- A(3) nonce: this request's nonce: the same call run again finds its history entry, which
--       keeps it, and answers as it did (see "Run twice" in prelude.lua)
-- Returns: JSON {status = changed (limit, previous, available) | not_found | kind_conflict |
--   too_late}, and in `ev` the history entry
if not semaphore_begin(KEYS, ARGV) then return TOO_LATE end
local new, nonce = tonumber(A(1)), A(3) or ''
local again = entry_by(nonce)
if again then
  -- (The permits available now: what the first call left, unless they moved since.)
  local e, ok, free = cjson.decode(again), pcall(redis.call, 'GET', L)
  return '{"status":"changed","limit":' .. d(e.limit) .. ',"previous":' .. d(e.previous)
    .. ',"available":' .. d(ok and tonumber(free) or 0) .. ',"ev":[' .. again .. ']}'
end
local _, st = load('', true)
local use = name_use(st)
if use == 'none' then return '{"status":"not_found"}' end
if use ~= 'semaphore' then return '{"status":"kind_conflict","held_as":"' .. use .. '"}' end
local events = {}
reclaim_expired(events, st.hexp)
local old = limit_of(st)
local available = redis.call('INCRBY', L, d(new - old))
set_state('limit', A(1))
if new > old and available > 0 then redis.call(PUBLISH, SEM_CHANNEL, d(available)) end
local entry = '{"type":"limit_changed","at_ms":' .. NOW_S .. ',"previous":' .. d(old)
  .. ',"limit":' .. d(new) .. ',"by":' .. js(A(2)) .. '}'
append_history(entry, st.hexp, nonce)
events[#events + 1] = entry
flush_state()
return '{"status":"changed","limit":' .. d(new) .. ',"previous":' .. d(old) .. ',"available":'
  .. d(available) .. ev(events) .. '}'
