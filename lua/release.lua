-- Release one reentry level of a lease (or all of them), for every lock kind, as Redisson's
-- unlock scripts do: at zero the lock is deleted (with its lock-delay) and waiters are woken (RLock: the unlock
-- message 0 on the lock's channel; RFairLock: only the queue's head, on its own channel;
-- RReadWriteLock: on redisson_rwlock:{L}, and a write hold released under a read hold of the
-- same lease turns the lock into a read lock). Also rolls back a grant whose client went
-- away, but only the grant the rolling-back request made and nobody has answered with since.
-- KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) lease_id: lease id
-- A(2) proven: "1" when the presented token proves the lease id
-- A(3) nonce: this request's nonce (a rollback's: the nonce of the request that made the
--       grant): the same call run again answers as it did (see "Run twice" in prelude.lua)
-- The rest are optional; the caller leaves out those at the end that are "" (the usual
-- release sends none of them):
-- A(4) all: "all" to release every level (of both modes, unless A(6) names one), "" for one
-- A(5) why: why: "" (released), or "client_gone" to roll back an undelivered grant
-- A(6) mode: read/write leases: which hold to release, "read" or "write" ("": write first)
-- A(7) key_digest: sha256 hex of the request's Idempotency-Key
-- A(8) fingerprint: sha256 hex of what the request asks
-- Returns: JSON with status = released | still_held | mode_not_held | lease_lost | queued |
--   forbidden | unknown_lease | not_rolled_back | idempotency_mismatch | too_late; released
--   carries the lease's kind, since_ms and now_ms (its age is their difference: the server
--   works it out, as formatting a number here costs more than the rest of the reply), and in
--   `ev` the lease's history entry (and any other event this call recorded), to publish;
--   still_held carries holder.
-- Run twice (see prelude.lua), a release answers as it did: a released level is known by the
-- lease's record, whose nonce becomes the releasing request's; a lease's end by its history
-- entry, which keeps that nonce (and, in the fixed fields, by the ended record's).
-- A released lease's history entry ends with one of these (made once, not on every call).
local ENDED_BY = {
  released = ',"reentry_count":0,"reason":"released"',
  client_gone = ',"reentry_count":0,"reason":"client_gone"',
}
-- What an early release (the usual request, release_last_shared) ends with: the lease's
-- history entry, appended (kept with `nonce`, the releasing request's), and the reply that
-- carries it, each made in one piece (every string Redis's Lua makes is hashed byte by byte,
-- and the entry is most of the reply).
local function released_reply(id, holder, kind, since, fence, hexp, nonce)
  local entry = '{"type":"released","lease_id":"' .. id .. '","holder":' .. jsn(holder)
    .. ',"kind":"' .. kind .. '","fencing_token":' .. fence .. ',"since_ms":' .. since
    .. ',"at_ms":' .. NOW_S .. ENDED_BY.released .. '}'
  append_history(entry, hexp, nonce)
  return '{"status":"released","kind":"' .. kind .. '","since_ms":' .. since .. ',"now_ms":'
    .. NOW_S .. ',"ev":[' .. entry .. ']}'
end

-- The usual release of a read or write lease: its last hold, while it holds the lock alone (L
-- is `mode` and its one hold), by its own token (see the usual request, below). It ends here
-- with what the general path would write, without load's tables, the check of every reader's
-- timeout key (a read lease's own is the only one, and deleting it is the check) or a second
-- read of L. nil: anything else, which the general path looks at; nothing has changed then,
-- and L's fields, when they were read, come back too (the general path uses them rather than
-- read L again: it has a field per reader). `hexp`: from the first read of STATE; `nonce`:
-- this request's.
local function release_last_shared(id, hexp, nonce)
  local r = redis.call('HMGET', STATE, 'r:' .. id, 'h:' .. id)
  local rec = r[1]
  -- (A held record with no end and no permits, not released from by this request: see the
  -- usual request, below.)
  if not rec or not string.find(rec, '||', -2, true)
    or string.find(rec, nonce, -2 - #nonce, true) then
    return nil
  end
  local fields, kind, since, fence = string.match(rec, '^held(|(%l+)|%d+|(%d+)|%d+|(%d+)|)')
  if kind ~= 'read' and kind ~= 'write' then return nil end
  local h = holder_id(id)
  local field = (kind == 'write') and (h .. ':write') or h
  local ok, flat = pcall(redis.call, 'HGETALL', L)
  if not ok then return nil end
  if #flat ~= 4 then return nil, flat end
  local count
  if flat[1] == 'mode' and flat[2] == kind and flat[3] == field then
    count = flat[4]
  elseif flat[3] == 'mode' and flat[4] == kind and flat[1] == field then
    count = flat[2]
  end
  if count ~= '1' then return nil, flat end
  -- (DEL answers 0 when a read hold's timeout key ran out: the lease lost the lock, which the
  -- general path records; nothing changed here. A write hold lives as long as L.)
  if kind == 'read' and redis.call('DEL', rw_timeout_key(h, 1)) == 0 then return nil, flat end
  -- (With the lock, its lock-delay: a release frees the name at once.)
  redis.call('DEL', L, STATE .. ':delay')
  redis.call(PUBLISH, rw_channel(), '0')
  redis.call('HDEL', STATE, 'r:' .. id, 'h:' .. id, 'm:' .. id)
  return released_reply(id, r[2], kind, since, fence, hexp, nonce)
end

-- The lines above run once, when the library loads; those below on every call
-- (src/locks/scripts/library.rs splits the file here).
-- @per-call
if not lock_begin(KEYS, ARGV) then return TOO_LATE end
-- (A(n) is ARGV[n + 2], read directly here: a function call per argument adds up.)
local id, proven, nonce, all = ARGV[3], ARGV[4] == '1', ARGV[5] or '', ARGV[6] == 'all'

-- The usual request: the last level of a lease held in the fixed fields (reentrant, exclusive,
-- fair with nobody queued), released by its own token, for no other reason, without an
-- Idempotency-Key (so no argument after A(4)). It ends here with what the general path below
-- would write, reading five fields of the state rather than eight, building no tables and
-- writing the state in one HSET (BENCHMARKS.md, W4). The last hold of a
-- read or write lease that holds the lock alone ends in release_last_shared. Anything else (a
-- queue to wake, a level left, a lease lost, a rollback) goes on to the general path.
-- A lease the fixed fields do not record (a shared one, a fair ticket, one that ended) is
-- looked for in its own fields on the general path (shared_read), which reads only the fields
-- of the state this first read did not (`probed`).
local shared_read, probed, flat_read = false, nil, nil
if proven and ARGV[7] == nil then
  local v = redis.call('HMGET', STATE, 'lease', 'rec', 'holder', 'q', 'hexp')
  shared_read = v[1] ~= id
  probed = v
  local rec, fields, kind, since, fence = v[2]
  -- A held record with no end and no permits (see pack): its fields up to the fence are
  -- matched, the rest checked by its last two characters (a nonce is hex): a pattern over
  -- the whole record costs more on every call (BENCHMARKS.md, W5). (string.find answers
  -- with a number: string.sub would make a string, which Redis's Lua hashes.) A record whose
  -- nonce is this request's had a level released by this very call already (it runs again:
  -- see "Run twice" in prelude.lua), which the general path answers: the nonce, hex, can only
  -- match where it ends the record, before its empty end and permits (a find in the record's
  -- last characters, no string made; a field more to read would cost more).
  if v[1] == id and not v[4] and rec and string.find(rec, '||', -2, true)
    and not string.find(rec, nonce, -2 - #nonce, true) then
    fields, kind, since, fence = string.match(rec, '^held(|(%l+)|%d+|(%d+)|%d+|(%d+)|)')
  end
  -- The holder's count in L: the last level is "1", compared as text (a conversion to a
  -- number costs more than the comparison). (redis.pcall: L may have become some other type
  -- of key; that is the general path's case, as is a count that is not a number.)
  local count = (kind == 'reentrant' or kind == 'exclusive' or kind == 'fair')
    and redis.pcall('HGET', L, holder_id(id))
  if count == '1' or all and type(count) == 'string' and (tonumber(count) or 0) > 1 then
    -- (With the lock, its lock-delay: a release frees the name at once.)
    redis.call('DEL', L, STATE .. ':delay')
    redis.call(PUBLISH, channel(), '0')
    local reply = released_reply(id, v[3], kind, since, fence, v[5], nonce)
    -- (What pack('released', ..., fence, nonce, NOW_S) makes of the held record's fields,
    -- and what released_reply's append_history queued, in one HSET.)
    redis.call('HSET', STATE, 'rec', 'released' .. fields .. nonce .. '|' .. NOW_S .. '|',
      unpack(W, 1, WN))
    WN = 0
    return reply
  end
  if shared_read then
    local reply
    reply, flat_read = release_last_shared(id, v[5], nonce)
    if reply then return reply end
  end
end

local reason, which = ARGV[7] or '', ARGV[8] or ''
local idem, fp = ARGV[9] or '', ARGV[10] or ''
if reason == '' then reason = 'released' end

if idem ~= '' then
  local first, _, _, by = idem_find(idem, fp)
  if first == 'mismatch' then return '{"status":"idempotency_mismatch"}' end
  -- (This very call run again gets its answer as it was: see "Run twice" in prelude.lua.)
  if first and same_request(by, nonce) then return first end
  if first then return idem_replay(first, '') end
end

local rec, st = load(id, nil, shared_read, shared_read and probed or nil)
if not proven then return not_yours(id, rec) end
local events = {}
-- This call run again (see "Run twice" in prelude.lua) answers as it did and changes nothing.
-- A level it released left its nonce in the lease's record (a rollback's nonce is the grant's
-- own, and rolls it back); the end it made is in the history, with its nonce (the record in
-- the fixed fields keeps it too, so other ended leases' releases are not looked up there).
local ended
if rec and rec.state == 'held' then
  if reason ~= 'client_gone' and same_request(rec.nonce, nonce) then
    local reads, writes = check_held(id, rec, st.hexp, events, flat_read)
    if not reads then return string.sub(writes, 1, -2) .. ev(events) .. '}' end
    return '{"status":"still_held","reentry_count":' .. d(reads + writes) .. ',"holder":'
      .. jsn(rec.holder) .. ev(events) .. '}'
  end
elseif nonce ~= '' and (not rec or rec.nonce == nonce) then
  ended = find_ended(id) or false
  if ended and same_request(ended.by, nonce) then return released_again(ended) end
  if not rec then return lost_or_unknown(id, ended) end
end
local reads, writes, flat = check_held(id, rec, st.hexp, events, flat_read)
if not reads then return string.sub(writes, 1, -2) .. ev(events) .. '}' end
if reason == 'client_gone' and (rec.nonce == '' or rec.nonce ~= nonce) then
  -- Another request answered with this grant (or another request made it): it stays.
  return '{"status":"not_rolled_back"' .. ev(events) .. '}'
end

local left
if is_rw(rec.kind) then
  local h = holder_id(id)
  local w = h .. ':write'
  local drop_writes, drop_reads = 0, 0
  if all and which == '' then
    drop_writes, drop_reads = writes, reads
  else
    if which == '' then which = (writes > 0) and 'write' or 'read' end
    if (which == 'write' and writes == 0) or (which == 'read' and reads == 0) then
      return '{"status":"mode_not_held","mode":"' .. which .. '"}'
    end
    if which == 'write' then
      drop_writes = all and writes or 1
    else
      drop_reads = all and reads or 1
    end
  end
  for i = reads, reads - drop_reads + 1, -1 do redis.call('DEL', rw_timeout_key(h, i)) end
  -- (L's fields as check_held read them: the timeout keys deleted above are not among them.)
  local before = flat and #flat / 2 or redis.call('HLEN', L)
  writes, reads = writes - drop_writes, reads - drop_reads
  left = reads + writes
  -- Fields that remain: mode, ours (if any level is left), everyone else's.
  local others = before - 1 - ((reads > 0 or drop_reads > 0) and 1 or 0)
    - ((writes > 0 or drop_writes > 0) and 1 or 0)
  if left == 0 and others == 0 then
    redis.call('DEL', L, delay_key())
    redis.call(PUBLISH, rw_channel(), '0')
  else
    if writes > 0 then
      redis.call('HSET', L, w, d(writes))
    elseif drop_writes > 0 then
      redis.call('HDEL', L, w)
    end
    if reads > 0 then
      redis.call('HSET', L, h, d(reads))
    elseif drop_reads > 0 then
      redis.call('HDEL', L, h)
    end
    local woken = false
    if writes == 0 and drop_writes > 0 then
      -- The write hold is gone: our read holds remain (a downgrade), or other readers'; either
      -- way other readers may now join.
      redis.call('HSET', L, 'mode', 'read')
      redis.call(PUBLISH, rw_channel(), '0')
      woken = true
    end
    if left == 0 then
      -- The other holders may all be readers that stopped heartbeating (their timeout keys
      -- ran out, their fields linger until someone looks): look now, so that a lock this
      -- release leaves free wakes its waiting writers instead of leaving them parked until
      -- their own timers. (Ours are gone already, so only others' are judged.)
      prune_dead_readers(events, st.hexp)
    end
    if redis.call('HGET', L, 'mode') == 'read' then
      local longest = max_read_ttl()
      if longest > 0 then
        -- A refused waiter sleeps until the expiry its refusal named (at most). When this
        -- release brings the lock's expiry forward (the longest read hold let go, shorter ones
        -- left), that sleep would outlast the holds: wake the waiters to look again, or a writer
        -- parks while the lock is free, until its own wait ends.
        local before = redis.call('PTTL', L)
        redis.call('PEXPIRE', L, longest)
        if not woken and longest < before then redis.call(PUBLISH, rw_channel(), '0') end
      end
    end
  end
else
  if all or reads <= 1 then
    left = 0
    redis.call('DEL', L, delay_key())
    wake_next(st.q, events, st.hexp)
  else
    left = redis.call('HINCRBY', L, holder_id(id), -1)
    redis.call('PEXPIRE', L, rec.ttl)
    follow_delay(NOW + tonumber(rec.ttl), false)
  end
end

if left > 0 then
  -- (The nonce marks the level released by this request: see "Run twice" in prelude.lua.)
  rec.expires, rec.nonce = d(NOW + tonumber(rec.ttl)), nonce
  save(rec)
  flush_state(NOW + tonumber(rec.ttl) + TOMB, st.sexp)
  return idem_answer(idem, fp, '{"status":"still_held","reentry_count":' .. d(left)
    .. ',"holder":' .. jsn(rec.holder) .. ev(events) .. '}', id, '', TOMB, nonce)
end
local since = rec.since
local entry = finish(rec, 'released', st.hexp,
  ENDED_BY[reason] or (',"reentry_count":0,"reason":"' .. reason .. '"'), nil, nonce)
-- (The usual reply, with this lease's entry alone in `ev`, is made in one piece: every string
-- Redis's Lua makes is hashed byte by byte, and the entry is most of the reply.)
local reply
if #events == 0 then
  reply = '{"status":"released","kind":"' .. rec.kind .. '","since_ms":' .. jt(since)
    .. ',"now_ms":' .. NOW_S .. ',"ev":[' .. entry .. ']}'
else
  events[#events + 1] = entry
  reply = '{"status":"released","kind":"' .. rec.kind .. '","since_ms":' .. jt(since)
    .. ',"now_ms":' .. NOW_S .. ev(events) .. '}'
end
return idem_answer(idem, fp, reply, id, '', TOMB, nonce)
