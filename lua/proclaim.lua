-- Proclaim: an election's leader publishes a new value in the same term (leases::election).
-- The value lives in its lease's metadata, and the election's terms log gets the
-- proclamation (log_term), so observers see it after the term's grant and before anything
-- that came later. Only the lease that holds the lock (the leader) may; a candidate still in
-- line is refused. KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) lease_id: the leader's lease id
-- A(2) proven: "1" when the presented token proves the lease id
-- A(3) metadata: the lease's new metadata (JSON text holding the value)
-- Returns: JSON with status = proclaimed | lease_lost | queued | forbidden | unknown_lease |
--   too_late; proclaimed carries the lease's fencing token (the term), its expiry and its
--   holder label, and its event (`ev`: a `proclaimed` entry, also in the history). Run twice (see "Run twice" in prelude.lua), it writes the same value again
--   and logs it once more; observers tell a value once.
if not lock_begin(KEYS, ARGV) then return TOO_LATE end
local id, proven, meta = A(1), A(2) == '1', A(3)
local rec, st = load(id)
if not proven then return not_yours(id, rec) end
local events = {}
local reads, writes = check_held(id, rec, st.hexp, events)
if not reads then return string.sub(writes, 1, -2) .. ev(events) .. '}' end
if st.lease == id then set_state('meta', meta) else set_state('m:' .. id, meta) end
log_term(id, rec.fence, rec.holder, meta, true)
flush_state(rec.expires + TOMB, st.sexp)
-- The history's entry, also the live event that wakes the election's observers.
local entry = '{"type":"proclaimed","lease_id":"' .. id .. '","holder":' .. jsn(rec.holder)
  .. ',"fencing_token":' .. rec.fence .. ',"at_ms":' .. NOW_S .. '}'
append_history(entry, st.hexp)
events[#events + 1] = entry
return '{"status":"proclaimed","fencing_token":' .. rec.fence .. ',"expires_ms":' .. rec.expires
  .. ',"holder":' .. jsn(rec.holder) .. ev(events) .. '}'
