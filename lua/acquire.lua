-- Acquire a lock of any kind for a new lease, re-enter a lease with its token, or let a fair
-- queue ticket try again. Layouts are Redisson's: RLock (reentrant, exclusive), RFairLock
-- (fair: queue list + deadline zset), RReadWriteLock (read, write: `mode`, holder fields,
-- rwlock_timeout keys). KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) ttl_ms: ttl (ms); "0" on reentry or poll keeps the lease's own TTL
-- A(2) op: "new", "reenter" (with a lease token) or "poll" (a fair ticket tries again)
-- A(3) lease_id: the lease id: the one the new token proves (new), the presented token proves
--       (reenter), or the ticket's (poll)
-- A(4) proven: "1" when the presented token proves A(3) (always for new and reenter)
-- A(5) kind: kind: reentrant | exclusive | fair | read | write, or "" (reentry: the lease's)
-- A(6) nonce: this request's nonce: only a rollback naming it may take back a grant made here,
--       and only until another request has answered with that grant; a reentry leaves it in
--       the lease's record, so that the same call run again is known (see "Run twice" in
--       prelude.lua)
-- The rest are optional; the caller leaves out those at the end that are "" (a new
-- reentrant, exclusive or read lease on its first try sends none of them):
-- A(7) arrived_ms: when this request first tried (ms, from an earlier reply), or "" for now
-- A(8) policy: read/write policy: "fifo", or "" (readers_first)
-- A(9) liveness_ms: how long a queue place (fair waiter, waiting writer) lasts without a further attempt
--       (ms); "" where no queue place can be taken: a new reentrant, exclusive or read lease
-- A(10) holder: holder label
-- A(11) metadata: metadata as JSON text
-- A(12) key_digest: sha256 hex of the request's Idempotency-Key
-- A(13) fingerprint: sha256 hex of what the request asks (checked against the key's first request)
-- A(14) sealed_token: the new lease's token sealed under the Idempotency-Key (hex)
-- A(15) lock_delay_ms: the new lease's lock-delay (ms; "" for none): once it ends other than
--       by a release (its TTL runs out, an admin removes it), the name refuses new leases
--       for that long (locklib.lua's keep_delay); a fair ticket keeps it until granted.
--       A reentry keeps the lease's own.
-- Returns: JSON with status = acquired | reentered | held | queued | lease_lost |
--   unknown_token | ticket_token | unknown_lease | forbidden | ticket_expired | kind_conflict |
--   not_reentrant | upgrade_refused | idempotency_mismatch | too_late. `held` with
--   `delayed` = true: the name is free but in its lock-delay, for `pttl` more ms (a fair
--   request is queued through it, with that `pttl`). A grant answered again
--   (a ticket polled after its grant, a retried Idempotency-Key) carries replayed = true, and,
--   for a new lease replayed by its key, `sealed`: the first token sealed under the key.
--   The same call run again (see "Run twice" in prelude.lua) answers as it did, changing
--   nothing: a grant (or reentry) as the same grant, not marked replayed, with `expires_ms`
--   (the lease's expiry, set by the first run); a ticket as the same place in the queue.
--   `ev`: events of other leases this call recorded (an expiry it noticed), to publish.
-- Made once, when the library loads: the values of the call being served (every call sets
-- them first, below the marker: Redis runs one function at a time), and the helpers that use
-- them. Helpers made inside the function, as closures over its locals, would cost an
-- allocation per captured local on every call (BENCHMARKS.md, W2).
local ttl, op, id, proven, kind, policy, liveness, arrival, nonce
local label, meta, idem, fp, sealed
local events, st, h
-- One events table for every call, emptied first (a new table per call is garbage to collect).
local EVENTS = {}
-- The events of a call that records none (never added to).
local NO_EVENTS = {}
-- A kind as it stands in a record (see KIND_FIELD's use).
local KIND_FIELD = {reentrant = '|reentrant|', exclusive = '|exclusive|', fair = '|fair|'}

-- The lock-delay a new lease asks for: A(15), read where a grant or a ticket needs it (a
-- per-call local would be one more upvalue of the function, at Lua's limit of 60).
local function asked_delay() return ARGS[17] or '' end

-- A grant's answer (numbers as text). `expires`: when the lease expires, for a grant
-- answered again: to another request (`replayed`), or to this one, run again.
local function acquired(status, count, fence, since, holder, expires, replayed)
  return '{"status":"' .. status .. '","lease_id":"' .. id .. '","kind":"' .. kind
    .. '","reentry_count":' .. count .. ',"fencing_token":' .. fence .. ',"ttl_ms":' .. ttl
    .. ',"now_ms":' .. NOW_S .. ',"now_us":' .. NOW_US_S .. ',"created_ms":' .. since
    .. ',"holder":' .. jsn(holder)
    .. (expires and ((replayed and ',"replayed":true' or '') .. ',"expires_ms":' .. expires)
      or '') .. ev(events) .. '}'
end

-- A fair ticket's answer: its place (`until_s`: its deadline, text), behind the live head
-- `head`; `new`: this call queued it (its event is then published).
local function queued(head, until_s, holder, new, delayed)
  -- Retry when the holder's TTL runs out (or the name's lock-delay, `delayed` ms), or when
  -- the head's deadline passes: a head that is an idle ticket is woken by a release but may
  -- never act, and must not hold us up longer.
  local pttl = delayed or redis.call('PTTL', L)
  if head and head ~= h then
    local ahead = (tonumber(redis.call('ZSCORE', timeouts_key(), head)) or NOW) - NOW
    pttl = (pttl > 0) and math.min(pttl, ahead) or ahead
  end
  -- Who the ticket waits for (its client is told, with how long it has held): the lease in
  -- the fixed fields, while it holds the lock.
  local cur = pttl > 0 and not delayed and current(st)
  local by = ''
  if cur and cur.state == 'held' and cur.id ~= id then
    by = ',"held_by":' .. jsn(cur.holder) .. ',"held_since_ms":' .. cur.since
  end
  return '{"status":"queued","lease_id":"' .. id .. '","position":'
    .. d(redis.call('LPOS', queue_key(), h) + 1) .. ',"pttl":' .. d(pttl) .. ',"deadline_ms":'
    .. until_s .. ',"now_us":' .. NOW_US_S .. ',"holder":' .. jsn(holder) .. by
    .. (new and ',"new":true' or '') .. ev(events) .. '}'
end

-- This request's new lease, or its ticket, is recorded already (`mine`, read from the fixed
-- fields or its own): the request's id comes from a token made for it, so this is its call
-- run again (see "Run twice" in prelude.lua). The same answer, changing nothing: the grant
-- as the same grant (its levels now, its expiry), the ticket as its place; a lease that ended
-- since is lost. nil: a ticket that lost its place, which the call then takes again.
local function again(mine)
  if mine.state == 'queued' then
    local until_s = redis.call('ZSCORE', timeouts_key(), h)
    if not until_s or not redis.call('LPOS', queue_key(), h) then return nil end
    return queued(redis.call('LINDEX', queue_key(), 0), until_s, mine.holder, true,
      redis.call('EXISTS', L) == 0 and delay_left() or nil)
  end
  if mine.state ~= 'held' then return '{"status":"lease_lost","state":"' .. mine.state .. '"}' end
  local reads, writes = check_held(id, mine, st.hexp, events)
  if not reads then return string.sub(writes, 1, -2) .. ev(events) .. '}' end
  kind, ttl = mine.kind, mine.ttl
  return acquired('acquired', d(reads + writes), mine.fence, mine.since, mine.holder,
    mine.expires)
end

-- Grants a new lease (or a fair ticket's lease): fencing token, record, state. The lease
-- that held the lock before, if its record still says held, ran out unnoticed: its expiry is
-- recorded now, with the time it ran out.
local function grant(count, ticket)
  local shared = is_rw(kind)
  -- (Its record is unpacked only when it still says held: most have ended.)
  if not shared and st.lease and st.lease ~= id and string.sub(st.raw[2] or '', 1, 5) == 'held|' then
    local prev = current(st)
    if prev and prev.state == 'held' then observe_expiry(prev, st.hexp, events) end
  end
  local fence = next_fence(st.fence)
  local holder, metadata, delay = label, meta, asked_delay()
  if ticket then
    holder, metadata = ticket.holder, ticket.meta
    delay = redis.call('HGET', STATE, 'y:' .. id) or ''
    redis.call('HDEL', STATE, 'r:' .. id, 'h:' .. id, 'm:' .. id, 'y:' .. id)
  end
  -- A request that waited (its first try was at `arrival`, from an earlier refusal): its
  -- wait is recorded as a fair ticket's is, so the history and the timeline show it.
  if not ticket and arrival ~= NOW_S then
    append_history('{"type":"waited","lease_id":"' .. id .. '","holder":' .. jsn(holder)
      .. ',"kind":"' .. kind .. '","since_ms":' .. arrival .. ',"at_ms":' .. NOW_S .. '}',
      st.hexp)
  end
  local ttl_n = ttl + 0
  local keep = ttl_n + TOMB
  create_held(id, kind, ttl, d(NOW + ttl_n), fence, nonce, holder, metadata, shared, nil,
    st.raw)
  if kind == 'fair' then log_term(id, fence, holder, metadata) end
  keep_delay(delay, NOW + ttl_n, shared)
  set_state('fence', fence)
  if not shared and st.kind ~= family(kind) then set_state('kind', family(kind)) end
  flush_state(NOW + keep, st.sexp)
  return idem_answer(idem, fp, acquired('acquired', count, fence, NOW_S, holder), id, sealed,
    keep, nonce)
end

-- Who holds the lock, for a refused acquirer (never read out of another program's key); or,
-- `delayed`: nobody, but the name is in its lock-delay for that many more ms.
local function held(retry_ms, delayed)
  if delayed then
    return '{"status":"held","delayed":true,"pttl":' .. d(delayed) .. ',"now_ms":' .. NOW_S
      .. ',"arrived_ms":' .. arrival .. ev(events) .. '}'
  end
  local fields = redis.call('HKEYS', L)
  local field = fields[1]
  if field == 'mode' then field = fields[2] end
  local holder, lease_id, since
  local hid = field and string.match(field, '^(.-):1')
  if hid then
    local other = (hid == st.lease) and current(st) or load(hid)
    if other then holder, lease_id, since = other.holder, hid, other.since end
  end
  -- `since_ms` and `now_ms` (Redis's clock): how long the holder has held, for the refusal.
  return '{"status":"held","pttl":' .. d(retry_ms or redis.call('PTTL', L)) .. ',"holder_id":'
    .. jsn(field) .. ',"lease_id":' .. jsn(lease_id) .. ',"holder":' .. jsn(holder)
    .. (since and (',"since_ms":' .. since) or '') .. ',"now_ms":' .. NOW_S
    .. ',"arrived_ms":' .. arrival .. ev(events) .. '}'
end

-- @part acquire_free
-- The first answer to this request's Idempotency-Key, if it has one (see the usual request
-- and below), as it still holds; nil when the key has none.
local function idem_again()
  local first, first_lease, first_sealed, by = idem_find(idem, fp)
  if first == 'mismatch' then return '{"status":"idempotency_mismatch"}' end
  if not first then return nil end
  -- This very call, run again (see "Run twice" in prelude.lua), gets its answer as it was,
  -- and the grant stays this request's to roll back.
  local same = same_request(by, nonce)
  local rec, first_st = load(first_lease)
  if rec and rec.state == 'held' then
    local levels = check_held(first_lease, rec, first_st.hexp, events)
    if not levels then
      return '{"status":"lease_lost","state":"' .. rec.state .. '"' .. ev(events) .. '}'
    end
    if same then return first end
    rec.nonce = ''
    save(rec)
  elseif rec == nil and first_lease ~= '' then
    local ended = find_ended(first_lease)
    if ended then return '{"status":"lease_lost","state":"' .. ended.state .. '"}' end
  elseif rec and rec.state ~= 'queued' then
    return '{"status":"lease_lost","state":"' .. rec.state .. '"}'
  end
  if same then return first end
  return idem_replay(first, first_sealed)
end

-- Records this request's new fair ticket (with its nonce: the call run again finds its
-- ticket by it), and the lock-delay its lease is to have once granted (`y:<id>`).
local function queue_ticket()
  create({id = id, state = 'queued', kind = 'fair', ttl = ttl, since = NOW_S,
    expires = '0', fence = '0', nonce = nonce, holder = label, meta = meta, shared = true})
  local delay = asked_delay()
  if delay ~= '' then set_state('y:' .. id, delay) end
end

-- The usual request (see below), when it is one: a new lease on a name nobody uses (nor in
-- its lock-delay), without an Idempotency-Key, not after a wait, granted as grant_free_fixed
-- or grant_free_rw do; nil for anything else. (A function of its own, as grant_free_rw.)
local function usual_grant()
  if op ~= 'new' or idem ~= '' or arrival ~= NOW_S
    or redis.call('EXISTS', L, STATE .. ':delay') ~= 0 then
    return nil
  end
  if kind == 'reentrant' or kind == 'exclusive' or kind == 'fair' then
    return grant_free_fixed()
  elseif is_rw(kind) then
    return grant_free_rw()
  end
end

-- Reads the state (`st`) for a new lease, whose id comes from a token made for this request:
-- it has no record yet, unless this is the request's call run again (see "Run twice" in
-- prelude.lua), which answers as the first run did (see again): its answer, or nil. A new
-- reentrant or exclusive lease is recorded only in the fixed fields, which every call reads;
-- a fair one (a ticket) or a read or write lease in fields of its own, read in the same HMGET.
-- (The metadata in the fixed fields is read too, for the kinds recorded there: a grant need
-- not clear it when it is empty.)
local function load_new()
  local mine
  if kind == 'reentrant' or kind == 'exclusive' then
    mine, st = load('', 'meta')
    if st.lease == id then mine = current(st) end
  else
    mine, st = load(id, kind == 'fair' and 'meta' or nil, true)
  end
  return mine and again(mine)
end

-- The lines above run once, when the library loads; those below on every call
-- (src/locks/scripts/library.rs splits the file here).
-- @per-call
if not lock_begin(KEYS, ARGV) then return TOO_LATE end
-- (A(n) is ARGV[n + 2], read directly here: a function call per argument adds up.)
ttl, op, id, proven = ARGV[3], ARGV[4], ARGV[5], ARGV[6] == '1'
kind, nonce = ARGV[7], ARGV[8]
h = holder_id(id)
-- (Most requests send none of the optional arguments: one test then stands for eight.)
if ARGV[9] == nil then
  arrival, policy, liveness, label, meta, idem, fp, sealed = NOW_S, '', '', '', '', '', '', ''
else
  arrival, policy, liveness = ARGV[9], ARGV[10] or '', ARGV[11] or ''
  label, meta = ARGV[12] or '', ARGV[13] or ''
  idem, fp, sealed = ARGV[14] or '', ARGV[15] or '', ARGV[16] or ''
  if arrival == '' then arrival = NOW_S end
end
-- (The usual request, below, records no event: it answers with NO_EVENTS, and EVENTS is
-- emptied only for the rest.)
events, st = NO_EVENTS, nil

-- The usual request: a new lease on a name nobody uses, without an Idempotency-Key, not after
-- a wait. It is granted here with what the general path below would write, but reading fewer
-- fields of the state (six rather than nine for the kinds recorded in the fixed fields, three
-- for read and write), building no tables and writing the state in one HSET (BENCHMARKS.md,
-- W3). Whatever else it finds (a fair queue,
-- a lease whose record still says held: it ran out unnoticed, and its expiry must be
-- recorded) goes on to the general path, which reads what it needs itself.
-- (A name in its lock-delay is not one nobody uses: the delay key counts. The test is in
-- usual_grant, as is the grant: this function is at Lua's limit of 60 upvalues.)
do
  local reply = usual_grant()
  if reply then return reply end
end
for i = #EVENTS, 1, -1 do EVENTS[i] = nil end
events = EVENTS

-- A retry with the same Idempotency-Key gets the first answer, as long as it still holds.
if idem ~= '' then
  local reply = idem_again()
  if reply then return reply end
end

-- A new lease: see load_new. A reentry or a ticket's poll: the lease's record.
local rec
if op == 'new' then
  local reply = load_new()
  if reply then return reply end
else
  rec, st = load(id, 'meta')
end

local ticket
if op == 'poll' then
  if not proven then return not_yours(id, rec) end
  if not rec then
    local ended = find_ended(id)
    if ended and ended.kind == 'fair' then
      if ended.state == 'expired' and (tonumber(ended.fence) or 0) == 0 then
        -- It lost its place in the queue before it was granted.
        return '{"status":"ticket_expired"}'
      end
      return '{"status":"lease_lost","state":"' .. ended.state .. '"}'
    end
    return '{"status":"unknown_lease"}'
  end
  if rec.kind ~= 'fair' then return '{"status":"unknown_lease"}' end
  if rec.state == 'held' then
    -- Granted before: polled again in a row, or by two connections at once. The same grant
    -- again, never a release; answered now, so no rollback may take it back. (Granted by
    -- this very call, run again: answered as it was, and still this request's to roll back.)
    kind, ttl = rec.kind, rec.ttl
    local reads = held_levels(rec)
    if reads > 0 then
      local same = nonce ~= '' and rec.nonce == nonce
      if not same then
        rec.nonce = ''
        save(rec)
      end
      return acquired('acquired', d(reads), rec.fence, rec.since, rec.holder, rec.expires,
        not same)
    end
    return '{"status":"lease_lost","state":"' .. observe_expiry(rec, st.hexp, events) .. '"'
      .. ev(events) .. '}'
  end
  if rec.state ~= 'queued' then
    return '{"status":"lease_lost","state":"' .. rec.state .. '"}'
  end
  local deadline = redis.call('ZSCORE', timeouts_key(), h)
  if not deadline or tonumber(deadline) <= NOW then
    redis.call('LREM', queue_key(), 0, h)
    redis.call('ZREM', timeouts_key(), h)
    events[#events + 1] = finish(rec, 'expired', st.hexp, nil, deadline or NOW_S)
    return '{"status":"ticket_expired"' .. ev(events) .. '}'
  end
  kind = 'fair'
  if ttl == '0' then ttl = rec.ttl end
  ticket = rec
end

-- A new lease or a polled ticket: the name must not be used as another kind. Fair tickets
-- and free exclusive locks are settled here.
local free
if op ~= 'reenter' then
  -- (`delayed`: a free name in its lock-delay grants nothing yet: a fair request keeps, or
  -- takes, its place in the queue through it, any other is refused with the time left.)
  local conflict, now_as, t, delayed = conflict_with(st, kind, events)
  if conflict then
    return '{"status":"kind_conflict","held_as":"' .. conflict .. '"' .. ev(events) .. '}'
  end
  free = t == 'none'

  if kind == 'fair' then
    local head = st.q and prune_queue(events, st.hexp) or nil
    if free and not delayed and (not head or head == h) then
      if head then redis.call('LPOP', queue_key()) end
      if ticket then redis.call('ZREM', timeouts_key(), h) end
      redis.call('HSET', L, h, '1')
      redis.call('PEXPIRE', L, ttl)
      return grant('1', ticket)
    end
    local known = ticket and redis.call('ZSCORE', timeouts_key(), h)
    local until_s = d(NOW + tonumber(liveness))
    redis.call('ZADD', timeouts_key(), until_s, h)
    if not known then
      redis.call('RPUSH', queue_key(), h)
      set_state('q', '1')
      if not ticket then
        -- (With this request's nonce: the call run again finds its ticket by it.)
        queue_ticket()
        -- One more waits: the holder's watches hear of it (`contended`).
        redis.call(PUBLISH, watch_channel(), '0')
      end
    end
    flush_state(NOW + tonumber(liveness) + TOMB + tonumber(ttl), st.sexp)
    local reply = queued(head, until_s, ticket and ticket.holder or label, not ticket,
      delayed or nil)
    if ticket then return reply end
    return idem_answer(idem, fp, reply, id, sealed, tonumber(liveness) + TOMB + tonumber(ttl),
      nonce)
  end

  if delayed then return held(nil, delayed) end
  if free and not is_rw(kind) then
    redis.call('HSET', L, h, '1')
    redis.call('PEXPIRE', L, ttl)
    return grant('1')
  end
end

if op == 'reenter' then
  if not rec then
    local ended = find_ended(id)
    if ended and ended.kind ~= 'semaphore' then
      return '{"status":"lease_lost","state":"' .. ended.state .. '"}'
    end
    return '{"status":"unknown_token"}'
  end
  if rec.kind == 'semaphore' then return '{"status":"unknown_token"}' end
  if rec.state == 'queued' then return '{"status":"ticket_token"}' end
  if kind == '' then kind = rec.kind end
  if family(kind) ~= family(rec.kind) then
    return '{"status":"kind_conflict","held_as":"' .. family(rec.kind) .. '"}'
  end
  local reads, writes = check_held(id, rec, st.hexp, events)
  if not reads then return string.sub(writes, 1, -2) .. ev(events) .. '}' end
  if rec.kind == 'exclusive' then return '{"status":"not_reentrant"}' end
  if ttl == '0' then ttl = rec.ttl end
  -- Entered by this very call, run again (see "Run twice" in prelude.lua): the record's nonce
  -- is this request's. The same reentry, not one more level.
  if nonce ~= '' and rec.nonce == nonce then
    return acquired('reentered', d(reads + writes), rec.fence, rec.since, rec.holder,
      rec.expires)
  end
  local count, w
  if is_rw(kind) then
    local n, why = rw_enter(kind, true, false)
    if not n then
      if why == 'upgrade' then return '{"status":"upgrade_refused"}' end
      return held()
    end
    local r
    r, w = held_levels(rec)
    refresh_rw(h, ttl, r, w)
    count = r + w
  else
    count = redis.call('HINCRBY', L, h, 1)
    redis.call('PEXPIRE', L, ttl)
  end
  local ttl_n = tonumber(ttl)
  lease_extended(rec, ttl_n, w or 0, st.q)
  -- (The nonce marks the level this request entered: see above.)
  rec.ttl, rec.expires, rec.nonce = ttl, d(NOW + ttl_n), nonce
  save(rec)
  flush_state(NOW + ttl_n + TOMB, st.sexp)
  local entry = '{"type":"reentered","lease_id":"' .. id .. '","holder":' .. jsn(rec.holder)
    .. ',"kind":"' .. kind .. '","reentry_count":' .. d(count) .. ',"fencing_token":'
    .. rec.fence .. ',"ttl_ms":' .. ttl .. ',"at_ms":' .. NOW_S .. '}'
  append_history(entry, st.hexp)
  events[#events + 1] = entry
  return idem_answer(idem, fp, acquired('reentered', d(count), rec.fence, rec.since, rec.holder),
    id, sealed, TOMB + ttl_n, nonce)
end

if is_rw(kind) then
  local n, why, retry = rw_enter(kind, false, free)
  if n then return grant(d(n)) end
  if why == 'upgrade' then return '{"status":"upgrade_refused"}' end
  return held(retry)
end

return held()
