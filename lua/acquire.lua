-- Acquire a lock of any kind for a new lease, re-enter a lease with its token, or let a fair
-- queue ticket try again. Layouts are Redisson's: RLock (reentrant, exclusive), RFairLock
-- (fair: queue list + deadline zset), RReadWriteLock (read, write: `mode`, holder fields,
-- rwlock_timeout keys). KEYS: see locklib.lua. ARGV[1..4]: see prelude.lua.
-- ARGV[5]: ttl (ms); "0" on reentry or poll keeps the lease's own TTL
-- ARGV[6]: "new", "reenter" (with a lease token) or "poll" (a fair ticket tries again)
-- ARGV[7]: the lease id (new: a fresh id; poll: the ticket's id; reenter: ignored)
-- ARGV[8]: sha256 hex of the token (new: the fresh token; otherwise the presented one)
-- ARGV[9]: holder label ("" for none)
-- ARGV[10]: metadata as JSON text ("" for none)
-- ARGV[11]: kind: reentrant | exclusive | fair | read | write, or "" (reentry: the lease's)
-- ARGV[12]: read/write policy: readers_first | fifo
-- ARGV[13]: how long a queue place (fair waiter, waiting writer) lasts without a further
--           attempt (ms)
-- ARGV[14]: when this request first tried (ms, from an earlier reply), or "0" for now
-- ARGV[15]: this request's nonce: only a rollback naming it may take back a grant made here,
--           and only until another request has answered with that grant
-- ARGV[16]: sha256 hex of the request's Idempotency-Key, or ""
-- ARGV[17]: sha256 hex of what the request asks (checked against the key's first request)
-- ARGV[18]: the new lease's token sealed under the Idempotency-Key (hex), or ""
-- Returns: JSON with status = acquired | reentered | held | queued | lease_lost |
--   unknown_token | ticket_token | unknown_lease | forbidden | ticket_expired | kind_conflict |
--   not_reentrant | upgrade_refused | idempotency_mismatch. A grant answered again (a ticket
--   polled after its grant, a retried Idempotency-Key) carries replayed = true, and, for a new
--   lease replayed by its key, `sealed`: the first token sealed under the key.
local ttl = tonumber(ARGV[5])
local op, id, digest = ARGV[6], ARGV[7], ARGV[8]
local kind, policy = ARGV[11], ARGV[12]
local liveness, arrival = tonumber(ARGV[13]), tonumber(ARGV[14])
local nonce, idem, fp, sealed = ARGV[15], ARGV[16], ARGV[17], ARGV[18]
if arrival == 0 then arrival = NOW end

-- An answer to keep for the Idempotency-Key, if there is one, for `life` ms.
local function answer(fields, lease_id, life)
  local json = encode(fields)
  idem_store(TAG, idem, fp, json, lease_id, sealed, life or (TOMB + (ttl or 0)))
  return json
end

-- The grant a lease holds now, answered again: the client missed (or doubled) the first
-- answer. It is delivered now, so no rollback may take it back.
local function regrant(lease)
  redis.call('HSET', lease.key, 'grant_nonce', '')
  local count = (tonumber(redis.call('HGET', L, holder_id(lease.id))) or 0)
    + (tonumber(redis.call('HGET', L, holder_id(lease.id) .. ':write')) or 0)
  return encode({status = 'acquired', replayed = true, lease_id = lease.id,
    holder = lease.holder, kind = lease.kind, reentry_count = count,
    fencing_token = lease.fence, ttl_ms = lease.ttl, now_ms = NOW,
    created_ms = lease.acquired, expires_ms = NOW + math.max(redis.call('PTTL', L), 0)})
end

-- A retry with the same Idempotency-Key gets the first answer, as long as it still holds.
local first, first_lease, first_sealed = idem_find(TAG, idem, fp)
if first == 'mismatch' then return encode({status = 'idempotency_mismatch'}) end
if first then
  local lease = first_lease ~= '' and read_lease(TAG, first_lease)
  if lease and lease.state == 'held' then
    if not lease_holds(lease) then
      return encode({status = 'lease_lost', state = observe_expiry(lease)})
    end
    redis.call('HSET', lease.key, 'grant_nonce', '')
  elseif lease and lease.state ~= 'queued' then
    return encode({status = 'lease_lost', state = lease.state})
  end
  return idem_replay(first, first_sealed)
end

-- Who holds the lock, for a refused acquirer (never read out of another program's key).
local function held(retry_ms)
  local field = redis.call('HKEYS', L)[1]
  if field == 'mode' then field = redis.call('HKEYS', L)[2] end
  local holder, lease_id
  local hid = field and string.match(field, '^(.-):1')
  if hid then
    holder = redis.call('HGET', lease_key(TAG, hid), 'holder') or nil
    if holder then lease_id = hid end
  end
  return encode({status = 'held', pttl = retry_ms or redis.call('PTTL', L), holder_id = field,
    lease_id = lease_id, holder = holder, arrived_ms = arrival})
end

-- The live waiting writer that arrived before `arrival` and so goes first under the fifo
-- policy, dropping dead entries; returns its deadline or nil.
local function earlier_writer()
  local wkey, until_key = writers_key(), writers_key() .. ':until'
  local ids = redis.call('ZRANGEBYSCORE', wkey, '-inf', '(' .. arrival)
  for _, wid in ipairs(ids) do
    local deadline = tonumber(redis.call('ZSCORE', until_key, wid))
    if deadline and deadline > NOW and wid ~= id then return deadline end
    redis.call('ZREM', wkey, wid)
    redis.call('ZREM', until_key, wid)
  end
  return nil
end

-- One more read or write hold for holder `lid`; returns the new count for that mode, or
-- nil and a reason: "blocked" (with the time to retry) or "upgrade".
local function rw_enter(lid, mode_wanted, holding)
  prune_dead_readers()
  local mode = redis.call('HGET', L, 'mode')
  local h = holder_id(lid)
  local w = h .. ':write'
  if mode_wanted == 'read' then
    local ok = (not mode) or mode == 'read' or redis.call('HEXISTS', L, w) == 1
    if ok and policy == 'fifo' and not holding then
      local deadline = earlier_writer()
      if deadline then
        local pttl = redis.call('PTTL', L)
        return nil, 'blocked', (pttl > 0) and math.min(pttl, deadline - NOW) or deadline - NOW
      end
    end
    if not ok then return nil, 'blocked', redis.call('PTTL', L) end
    if not mode then redis.call('HSET', L, 'mode', 'read') end
    local n = redis.call('HINCRBY', L, h, 1)
    redis.call('SET', rw_timeout_key(h, n), 1, 'PX', ttl)
    redis.call('PEXPIRE', L, math.max(redis.call('PTTL', L), ttl))
    return n
  end
  if not mode then
    redis.call('HSET', L, 'mode', 'write', w, 1)
    redis.call('PEXPIRE', L, ttl)
    redis.call('ZREM', writers_key(), lid)
    redis.call('ZREM', writers_key() .. ':until', lid)
    return 1
  end
  if mode == 'write' and redis.call('HEXISTS', L, w) == 1 then
    local n = redis.call('HINCRBY', L, w, 1)
    redis.call('PEXPIRE', L, math.max(redis.call('PTTL', L), ttl))
    return n
  end
  if redis.call('HEXISTS', L, h) == 1 then return nil, 'upgrade' end
  -- Blocked: stand in line so that fifo readers arriving later wait behind us.
  redis.call('ZADD', writers_key(), 'NX', arrival, lid)
  redis.call('ZADD', writers_key() .. ':until', NOW + liveness, lid)
  return nil, 'blocked', redis.call('PTTL', L)
end

-- Grants a new lease (or a fair ticket's lease): fencing token, state, record, event.
local function grant(lid, count, existing)
  local previous = redis.call('HGET', STATE, 'lease')
  if previous and previous ~= lid and not is_rw(kind) then
    local prev = read_lease(TAG, previous)
    if prev and not lease_holds(prev) then observe_expiry(prev) end
  end
  local fence = next_fence(STATE)
  redis.call('HSET', STATE, 'lease', lid, 'kind', family(kind))
  local fields = {state = 'held', kind = kind, fencing_token = fence, ttl_ms = ttl,
    expires_ms = NOW + ttl, acquired_ms = NOW, grant_nonce = nonce}
  if existing then
    local flat = {}
    for k, v in pairs(fields) do
      flat[#flat + 1] = k
      flat[#flat + 1] = v
    end
    redis.call('HSET', existing.key, unpack(flat))
    touch_lease(existing, ttl + TOMB)
  else
    fields.holder = ARGV[9]
    fields.metadata = ARGV[10]
    create_lease(TAG, lid, fields, digest, ttl + TOMB)
  end
  local holder = existing and existing.holder or ARGV[9]
  publish_event({type = existing and 'granted' or 'acquired', lease_id = lid, holder = holder,
    kind = kind, reentry_count = count, fencing_token = fence, ttl_ms = ttl})
  return answer({status = 'acquired', lease_id = lid, holder = holder, kind = kind,
    reentry_count = count, fencing_token = fence, ttl_ms = ttl, now_ms = NOW,
    created_ms = NOW}, lid)
end

if op == 'reenter' then
  local lid = redis.call('GET', token_key(TAG, digest))
  local lease = lid and read_lease(TAG, lid)
  if not lease or lease.kind == 'semaphore' then return encode({status = 'unknown_token'}) end
  if lease.state == 'queued' then return encode({status = 'ticket_token'}) end
  if kind == '' then kind = lease.kind end
  if family(kind) ~= family(lease.kind) then
    return encode({status = 'kind_conflict', held_as = family(lease.kind)})
  end
  if is_rw(lease.kind) then prune_dead_readers() end
  if not lease_holds(lease) then
    return encode({status = 'lease_lost', state = observe_expiry(lease)})
  end
  if lease.kind == 'exclusive' then return encode({status = 'not_reentrant'}) end
  if ttl == 0 then ttl = lease.ttl end
  local count
  if is_rw(kind) then
    local n, why = rw_enter(lease.id, kind, true)
    if not n then
      if why == 'upgrade' then return encode({status = 'upgrade_refused'}) end
      return held()
    end
    count = refresh_rw(holder_id(lease.id), ttl)
  else
    count = redis.call('HINCRBY', L, holder_id(lease.id), 1)
    redis.call('PEXPIRE', L, ttl)
  end
  redis.call('HSET', lease.key, 'ttl_ms', ttl, 'expires_ms', NOW + ttl)
  touch_lease(lease, ttl + TOMB)
  publish_event({type = 'reentered', lease_id = lease.id, holder = lease.holder,
    kind = kind, reentry_count = count, fencing_token = lease.fence, ttl_ms = ttl})
  return answer({status = 'reentered', lease_id = lease.id, holder = lease.holder, kind = kind,
    reentry_count = count, fencing_token = lease.fence, ttl_ms = ttl, now_ms = NOW,
    created_ms = lease.acquired}, lease.id)
end

local ticket
if op == 'poll' then
  ticket = read_lease(TAG, id)
  if not ticket or ticket.kind ~= 'fair' then return encode({status = 'unknown_lease'}) end
  if not same_digest(ticket.digest, digest) then return encode({status = 'forbidden'}) end
  if ticket.state == 'held' then
    -- Granted before: polled again in a row, or by two connections at once. The same grant
    -- again, never a release.
    if lease_holds(ticket) then return regrant(ticket) end
    return encode({status = 'lease_lost', state = observe_expiry(ticket)})
  end
  if ticket.state ~= 'queued' then
    return encode({status = 'lease_lost', state = ticket.state})
  end
  local deadline = tonumber(redis.call('ZSCORE', TIMEOUTS, holder_id(id)))
  if not deadline or deadline <= NOW then
    redis.call('LREM', QUEUE, 0, holder_id(id))
    redis.call('ZREM', TIMEOUTS, holder_id(id))
    end_lease(ticket, 'expired')
    return encode({status = 'ticket_expired'})
  end
  kind = 'fair'
  if ttl == 0 then ttl = ticket.ttl end
end

local conflict = conflict_with(kind)
if conflict then return encode({status = 'kind_conflict', held_as = conflict}) end

if is_rw(kind) then
  local n, why, retry = rw_enter(id, kind, false)
  if n then return grant(id, n) end
  if why == 'upgrade' then return encode({status = 'upgrade_refused'}) end
  return held(retry)
end

if kind == 'fair' then
  local field = holder_id(id)
  local head = prune_queue()
  if redis.call('EXISTS', L) == 0 and (not head or head == field) then
    if head then redis.call('LPOP', QUEUE) end
    redis.call('ZREM', TIMEOUTS, field)
    redis.call('HSET', L, field, 1)
    redis.call('PEXPIRE', L, ttl)
    return grant(id, 1, ticket)
  end
  local known = redis.call('ZSCORE', TIMEOUTS, field)
  redis.call('ZADD', TIMEOUTS, NOW + liveness, field)
  if not known then
    redis.call('RPUSH', QUEUE, field)
    if not ticket then
      create_lease(TAG, id, {state = 'queued', kind = 'fair', holder = ARGV[9],
        metadata = ARGV[10], ttl_ms = ttl, queued_ms = NOW}, digest, liveness + TOMB)
      publish_event({type = 'queued', lease_id = id, holder = ARGV[9]})
    end
  end
  if ticket then touch_lease(ticket, liveness + TOMB) end
  -- Retry when the holder's TTL runs out, or when the head's deadline passes: a head that is
  -- an idle ticket is woken by a release but may never act, and must not hold us up longer.
  local pttl = redis.call('PTTL', L)
  if head and head ~= field then
    local ahead = (tonumber(redis.call('ZSCORE', TIMEOUTS, head)) or NOW) - NOW
    pttl = (pttl > 0) and math.min(pttl, ahead) or ahead
  end
  local reply = {status = 'queued', lease_id = id, position = redis.call('LPOS', QUEUE, field) + 1,
    pttl = pttl, deadline_ms = NOW + liveness}
  if ticket then return encode(reply) end
  return answer(reply, id, liveness + TOMB + ttl)
end

if redis.call('EXISTS', L) == 1 then return held() end
redis.call('HSET', L, holder_id(id), 1)
redis.call('PEXPIRE', L, ttl)
return grant(id, 1)
