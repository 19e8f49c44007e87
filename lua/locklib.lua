-- Leasehold's Redis Function library, part 2: lock helpers (after prelude.lua). Every lock
-- function calls lock_begin() after begin(); the keys and channels below are built from L:
-- CHANNEL: Redisson's RLock/RFairLock channel (redisson_lock__channel:{L})
-- RW_CHANNEL: Redisson's RReadWriteLock channel (redisson_rwlock:{L})
-- QUEUE: Redisson's RFairLock queue (redisson_lock_queue:{L}), a list of holder ids
-- TIMEOUTS: Redisson's RFairLock timeouts (redisson_lock_timeout:{L}), holder id -> deadline
-- The read holds' timeout keys ({L}:<holder>:rwlock_timeout:<n>) follow Redisson's layout too.
-- Each is built when a call first needs it: making a string costs about a microsecond, and
-- most calls need none or one of them.
local CHANNEL, RW_CHANNEL, QUEUE, TIMEOUTS

local function lock_begin(keys, argv)
  CHANNEL, RW_CHANNEL, QUEUE, TIMEOUTS = nil, nil, nil, nil
  return begin(keys, argv)
end

local function channel()
  if not CHANNEL then CHANNEL = 'redisson_lock__channel:{' .. L .. '}' end
  return CHANNEL
end
local function rw_channel()
  if not RW_CHANNEL then RW_CHANNEL = 'redisson_rwlock:' .. tag() end
  return RW_CHANNEL
end
local function queue_key()
  if not QUEUE then QUEUE = 'redisson_lock_queue:' .. tag() end
  return QUEUE
end
local function timeouts_key()
  if not TIMEOUTS then TIMEOUTS = 'redisson_lock_timeout:' .. tag() end
  return TIMEOUTS
end

local function is_rw(kind) return kind == 'read' or kind == 'write' end

-- The family a kind shares a name with: read and write leases are one read/write lock.
local function family(kind)
  if is_rw(kind) then return 'rw' end
  return kind
end

local function writers_key() return tag() .. ':leasehold:writers' end
local function rw_timeout_key(field, n) return tag() .. ':' .. field .. ':rwlock_timeout:' .. n end

-- A semaphore of the same name (Redisson's RPermitExpirableSemaphore: L is its permit
-- counter, {L}:timeout its held permits).
local function sem_timeout_key() return tag() .. ':timeout' end

local function lock_shaped() return hash_is_lock(L) end

-- Lock-delay (Chubby's, Consul's): {L}:leasehold:delay holds the delay (ms) the lease holding
-- the lock asked for, and expires that long after the lease does. A lease whose TTL runs out
-- (Redis deletes L) thus leaves the name refusing new leases for the delay; a release deletes
-- it with L; a force release or an eviction makes it expire that long from now. A read/write
-- lock's holders share it: the longest delay any of them asked for, after the latest expiry.
-- Semaphores have none.
local function delay_key() return STATE .. ':delay' end

-- How long (ms) the name still refuses new leases, or nil. (The caller found L free.)
local function delay_left()
  local p = redis.call('PTTL', delay_key())
  if p > 0 then return p end
  return nil
end

-- An election's lock (`election/<name>`, see leases::election: a lock name cannot hold
-- `/`) logs each term as it is granted, in {L}:leasehold:terms (capped and kept like the
-- history): candidate id, term (the fencing token), holder label, metadata (its value), when.
-- Observers read terms from it in the order Redis granted them, so none is skipped or seen
-- out of order, whichever instance publishes first. Called for fair grants only: the usual
-- lock pays nothing. `proclaimed`: a new value in the term of lease `id` (proclaim.lua),
-- marked `p`.
local function log_term(id, fence, holder, meta, proclaimed)
  local at = string.find(L, 'election/', 1, true)
  if not at or string.find(L, '/', at + 9, true) then return end
  local key = STATE .. ':terms'
  redis.call('XADD', key, 'MAXLEN', '~', HISTORY_LENGTH, '*', 'c', id, 't', fence,
    'h', holder or '', 'm', meta or '', 'a', NOW_S, 'p', proclaimed and '1' or '')
  redis.call('PEXPIRE', key, HISTORY_LIFE_MS)
end

-- A lease granted now that expires at `expires` (ms) asked for lock-delay `ms` (text, "" for
-- none): the name refuses new leases until `expires` + `ms` unless it is released first.
-- `shared`: a read/write lease, which may join holders that asked for a delay already.
local function keep_delay(ms, expires, shared)
  if ms == '' then return end
  local n = ms + 0
  local key = delay_key()
  if shared then
    local v = redis.call('GET', key)
    if v then
      if n > v + 0 then redis.call('SET', key, ms, 'KEEPTTL') else n = v + 0 end
      redis.call('PEXPIREAT', key, d(expires + n), 'GT')
      return
    end
  end
  redis.call('SET', key, ms, 'PXAT', d(expires + n))
end

-- A lease holding the lock now expires at `expires` (ms): a reentry, a heartbeat, a level
-- released. Its lock-delay, if any, follows (`shared`: never sooner than the other holders').
local function follow_delay(expires, shared)
  local key = delay_key()
  local v = redis.call('GET', key)
  if not v then return end
  if shared then
    redis.call('PEXPIREAT', key, d(expires + v), 'GT')
  else
    redis.call('PEXPIREAT', key, d(expires + v))
  end
end

-- The lock was taken from its holders (force release, eviction) and is free now: its
-- lock-delay, if any, runs from now.
local function delay_from_now()
  local key = delay_key()
  local v = redis.call('GET', key)
  if v then redis.call('PEXPIRE', key, v) end
end

-- What the string L is: 'busy' (a semaphore with permits out), 'idle' (a semaphore with every
-- permit back), or nil (not a semaphore: some other program's string).
local function semaphore_state()
  local known = redis.call('HEXISTS', STATE, 'limit') == 1
  if not known and redis.call('EXISTS', sem_timeout_key()) == 0 then return nil end
  if not string.find(redis.call('GET', L), '^%-?%d+$') then return nil end
  if redis.call('ZCOUNT', sem_timeout_key(), '(' .. NOW_S, '+inf') > 0 then return 'busy' end
  return 'idle'
end

-- A fair ticket that lost its place (its deadline passed unpolled): its record ends
-- `expired` at `deadline` (text). Returns the history entry (the event).
local function ticket_expired(field, deadline, hexp)
  local id = string.match(field, '^(.*):1$')
  local rec = id and load(id)
  if rec and rec.state == 'queued' then
    return finish(rec, 'expired', hexp, nil, deadline)
  end
end

-- Drops waiters at the head of the fair queue whose deadline passed (Redisson does the same;
-- a dead waiter delays the queue by at most its liveness window). Returns the live head, and
-- the events of the tickets dropped (appended to `events`).
local function prune_queue(events, hexp)
  while true do
    local head = redis.call('LINDEX', queue_key(), 0)
    if not head then return nil end
    local deadline = redis.call('ZSCORE', timeouts_key(), head)
    if deadline and tonumber(deadline) > NOW then return head end
    redis.call('LPOP', queue_key())
    redis.call('ZREM', timeouts_key(), head)
    local e = ticket_expired(head, deadline or NOW_S, hexp)
    if e and events then events[#events + 1] = e end
  end
end

-- Whether a live waiter is queued (looking past dead ones without removing them).
local function queue_alive()
  for i = 0, 99 do
    local waiter = redis.call('LINDEX', queue_key(), i)
    if not waiter then return false end
    local deadline = tonumber(redis.call('ZSCORE', timeouts_key(), waiter))
    if deadline and deadline > NOW then return true end
  end
  return true
end

-- Whether our fair queue has a live waiter (see held_as).
local function live_queue(st, prune, events)
  if not st.q then return false end
  if prune then return prune_queue(events, st.hexp) ~= nil end
  return queue_alive()
end

-- What the name is used as now: semaphore (permits out), idle_semaphore, rw, fair,
-- exclusive, reentrant, foreign (a Redisson-layout lock no lease of ours holds), alien (a key
-- some other program made), or nil when free with nobody queued; and the TYPE of L. `st`:
-- what the caller read of STATE (see load). `prune`: drop dead fair waiters on the way
-- (functions that change state), so an abandoned ticket blocks other kinds no longer than
-- its liveness window.
local function held_as(st, prune, events)
  -- (EXISTS first: most calls find the name free, and its reply is a plain number.)
  local t = 'none'
  if redis.call('EXISTS', L) == 1 then t = redis.call('TYPE', L).ok end
  if t == 'none' then
    if live_queue(st, prune, events) then return 'fair', t end
    return nil, t
  end
  if t == 'string' then
    local s = semaphore_state()
    if s == 'busy' then return 'semaphore', t end
    if s == 'idle' then return 'idle_semaphore', t end
    return 'alien', t
  end
  if t ~= 'hash' then return 'alien', t end
  local ours = st.lease and redis.call('HEXISTS', L, holder_id(st.lease)) == 1
  if redis.call('HEXISTS', L, 'mode') == 1 then
    if ours or lock_shaped() then return 'rw', t end
    return 'alien', t
  end
  -- The recorded kind speaks only while its lease holds the lock; anyone else (a Redisson
  -- client) is foreign and merely contends.
  if ours then return st.kind, t end
  if not lock_shaped() then return 'alien', t end
  if live_queue(st, prune, events) then return 'fair', t end
  return 'foreign', t
end

-- Gives an idle semaphore's name to a lock: its counter, permits and limit go.
local function clear_idle_semaphore()
  redis.call('DEL', L, sem_timeout_key())
  redis.call('HDEL', STATE, 'limit')
end

-- The kind a request may not use while the name is used as another (`foreign` for a key of
-- another program), or nil; then what the name is used as, the TYPE of L (see held_as), and
-- when L is free and the name in its lock-delay, how long that lasts (ms; see delay_left).
local function conflict_with(st, kind, events)
  local now_as, t = held_as(st, true, events)
  if now_as == 'idle_semaphore' then
    clear_idle_semaphore()
    return nil, nil, 'none', delay_left()
  end
  if now_as == nil or now_as == family(kind) then
    return nil, now_as, t, t == 'none' and delay_left() or nil
  end
  if now_as == 'alien' then return 'foreign', now_as, t end
  if now_as == 'foreign' and not is_rw(kind) then return nil, now_as, t end
  return now_as, now_as, t
end

-- After the lock was let go: wake the fair queue's head alone, on its own channel as
-- Redisson's RFairLock does (O(1) whatever the queue's length, no thundering herd), or
-- everyone on the lock's channel (Redisson's RLock unlock message). `q`: our fair queue may
-- have waiters.
local function wake_next(q, events, hexp)
  local head = q and prune_queue(events, hexp)
  if head then
    redis.call(PUBLISH, channel() .. ':' .. head, '0')
  else
    redis.call(PUBLISH, channel(), '0')
  end
end

-- A holder's lease now ends sooner than it did (a heartbeat or reentry with a shorter TTL): a
-- waiter refused before sleeps until the expiry it was told (at most), and would sleep past
-- this one. Wakes the waiters to look again: the fair queue's head alone (as wake_next), the
-- others on the lock's channel. Call it before `rec.expires` (the expiry before) is updated;
-- a read/write lease moves the lock's expiry only while it writes (`writes` > 0: refresh_rw).
local function wake_if_sooner(rec, ttl_n, writes, q)
  if NOW + ttl_n >= (tonumber(rec.expires) or 0) then return end
  if is_rw(rec.kind) then
    if writes > 0 then redis.call(PUBLISH, rw_channel(), '0') end
    return
  end
  local head = q and redis.call('LINDEX', queue_key(), 0)
  if head then
    redis.call(PUBLISH, channel() .. ':' .. head, '0')
  elseif rec.kind ~= 'fair' then
    redis.call(PUBLISH, channel(), '0')
  end
end

-- A holder's lease now ends at NOW + `ttl_n` (a reentry, a heartbeat): waiters told of a
-- later expiry look again (wake_if_sooner, whose arguments these are), and the lease's
-- lock-delay follows.
local function lease_extended(rec, ttl_n, writes, q)
  wake_if_sooner(rec, ttl_n, writes, q)
  follow_delay(NOW + ttl_n, is_rw(rec.kind))
end

-- A read holder is alive while one of its rwlock_timeout keys is.
local function reader_alive(field, count)
  for i = count, 1, -1 do
    if redis.call('EXISTS', rw_timeout_key(field, i)) == 1 then return true end
  end
  return false
end

-- How many levels the lease holds now (read + write; 0 when it lost the lock). The name may
-- be a semaphore (or another program's key) by now.
local function held_levels(rec)
  local field = holder_id(rec.id)
  if is_rw(rec.kind) then
    local ok, v = pcall(redis.call, 'HMGET', L, field, field .. ':write')
    if not ok then return 0, 0 end
    return tonumber(v[1]) or 0, tonumber(v[2]) or 0
  end
  local ok, v = pcall(redis.call, 'HGET', L, field)
  if not ok then return 0, 0 end
  return tonumber(v) or 0, 0
end

-- A lease whose fields vanished while its record still says "held" ran out of TTL: record
-- that (with the time it ran out) and return the lease's state.
local function observe_expiry(rec, hexp, events)
  if rec.state ~= 'held' then return rec.state end
  local at = NOW_S
  if (tonumber(rec.expires) or NOW) < NOW then at = rec.expires end
  local e = finish(rec, 'expired', hexp, nil, at)
  if events then events[#events + 1] = e end
  return 'expired'
end

-- Removes read holders whose every timeout key expired: they stopped heartbeating while
-- other readers kept the lock hash alive. Each such lease is recorded as expired.
-- Returns the set of lease ids it recorded as expired, and, when it changed nothing in a
-- read/write lock, the fields it read (HGETALL: name, value, ...), which callers use rather
-- than read L again (two fewer commands per shared release). `read`: those fields as this
-- call read them already (nothing has changed L since), or nil.
local function prune_dead_readers(events, hexp, read)
  local expired = {}
  local ok, flat = true, read
  if not flat then ok, flat = pcall(redis.call, 'HGETALL', L) end
  if not ok then return expired end
  local has_mode = false
  for i = 1, #flat, 2 do
    if flat[i] == 'mode' then has_mode = true end
  end
  if not has_mode then return expired end
  local removed = false
  for i = 1, #flat, 2 do
    local field, count = flat[i], tonumber(flat[i + 1])
    if field ~= 'mode' and not string.find(field, ':write$') and count
      and not reader_alive(field, count) then
      redis.call('HDEL', L, field)
      removed = true
      local id = string.match(field, '^(.*):1$')
      local rec = id and load(id)
      if rec and held_levels(rec) == 0 then
        observe_expiry(rec, hexp, events)
        expired[id] = true
      end
    end
  end
  if removed and redis.call('HLEN', L) == 1 then
    redis.call('DEL', L)
    redis.call(PUBLISH, rw_channel(), '0')
  end
  if removed then return expired end
  return expired, flat
end

-- A holder's levels (read, write) in `flat`, a read of L's fields (HGETALL) that is still
-- current: what held_levels would read again.
local function levels_in(flat, field)
  local w = field .. ':write'
  local reads, writes = 0, 0
  for i = 1, #flat, 2 do
    local f = flat[i]
    if f == field then
      reads = tonumber(flat[i + 1]) or 0
    elseif f == w then
      writes = tonumber(flat[i + 1]) or 0
    end
  end
  return reads, writes
end

-- The longest remaining read hold, or -1.
local function max_read_ttl()
  local best = -1
  local flat = redis.call('HGETALL', L)
  for i = 1, #flat, 2 do
    local field, count = flat[i], tonumber(flat[i + 1])
    if field ~= 'mode' and not string.find(field, ':write$') and count then
      for n = count, 1, -1 do
        best = math.max(best, redis.call('PTTL', rw_timeout_key(field, n)))
      end
    end
  end
  return best
end

-- Gives every hold of read/write holder `h` the TTL `ttl` (text) from now: all its read
-- levels' timeout keys, and the lock hash (exactly `ttl` while it writes, else at least
-- `ttl`). A lease's levels share the lease's TTL, so releasing one level never leaves another
-- with an older, shorter one. `reads`, `writes`: the holder's levels now.
local function refresh_rw(h, ttl, reads, writes)
  for n = 1, reads do redis.call('PEXPIRE', rw_timeout_key(h, n), ttl) end
  if writes > 0 then
    redis.call('PEXPIRE', L, ttl)
  elseif redis.call('PTTL', L) < tonumber(ttl) then
    redis.call('PEXPIRE', L, ttl)
  end
end

-- A refusal for a lease without a record: one that ended (its history says how) or one
-- nobody knows. `ended`: what find_ended found, when the caller looked already (false:
-- nothing).
local function lost_or_unknown(id, ended)
  if ended == nil then ended = find_ended(id) end
  if ended and ended.kind ~= 'semaphore' then
    return '{"status":"lease_lost","state":"' .. ended.state .. '"}'
  end
  return '{"status":"unknown_lease"}'
end

-- Checks that lease `id` (whose record `rec` the caller read) still holds the lock. Returns
-- its levels (reads, writes) and, for a read/write lease, L's fields as prune_dead_readers
-- read them (or nil); or nil and the refusal (JSON) to return. `read`: see
-- prune_dead_readers.
local function check_held(id, rec, hexp, events, read)
  if not rec then return nil, lost_or_unknown(id) end
  if rec.kind == 'semaphore' then return nil, '{"status":"unknown_lease"}' end
  if rec.state == 'queued' then return nil, '{"status":"queued"}' end
  local flat
  if is_rw(rec.kind) then
    local expired
    expired, flat = prune_dead_readers(events, hexp, read)
    if expired[id] then return nil, '{"status":"lease_lost","state":"expired"}' end
  end
  local reads, writes
  if flat then
    reads, writes = levels_in(flat, holder_id(id))
  else
    reads, writes = held_levels(rec)
  end
  if rec.state ~= 'held' or reads + writes == 0 then
    return nil, '{"status":"lease_lost","state":"' .. observe_expiry(rec, hexp, events) .. '"}'
  end
  return reads, writes, flat
end

-- A token that does not prove lease `id`: forbidden if the lease exists (or existed), else
-- unknown.
local function not_yours(id, rec)
  if rec or find_ended(id) then return '{"status":"forbidden"}' end
  return '{"status":"unknown_lease"}'
end

-- A JSON list of events (entries) for the reply's `ev`.
local function ev(events)
  local n = #events
  if n == 0 then return '' end
  -- (One event, the usual case, is not copied into a string of its own first.)
  if n == 1 then return ',"ev":[' .. events[1] .. ']' end
  return ',"ev":[' .. table.concat(events, ',') .. ']'
end
