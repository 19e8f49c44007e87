-- Release one reentry level of a lease (or all of them), for every lock kind, as Redisson's
-- unlock scripts do: at zero the lock is deleted and waiters are woken (RLock: the unlock
-- message 0 on the lock's channel; RFairLock: only the queue's head, on its own channel;
-- RReadWriteLock: on redisson_rwlock:{L}, and a write hold released under a read hold of the
-- same lease turns the lock into a read lock). Also rolls back a grant whose client went
-- away, but only the grant the rolling-back request made and nobody has answered with since.
-- KEYS: see locklib.lua. ARGV[1..4]: see prelude.lua.
-- ARGV[5]: lease id
-- ARGV[6]: sha256 hex of the presented token
-- ARGV[7]: "all" to release every level (of both modes, unless ARGV[9] names one), "one"
-- ARGV[8]: why: "released", or "client_gone" to roll back an undelivered grant
-- ARGV[9]: read/write leases: which hold to release, "read", "write" or "" (write first)
-- ARGV[10]: client_gone: the nonce of the request that made the grant
-- ARGV[11]: sha256 hex of the request's Idempotency-Key, or ""
-- ARGV[12]: sha256 hex of what the request asks
-- Returns: JSON with status = released | still_held | mode_not_held | lease_lost | queued |
--   forbidden | unknown_lease | not_rolled_back | idempotency_mismatch; released carries the
--   lease's kind and held_ms, its age (ms); a retried key's answer carries replayed = true
local all, reason, which = ARGV[7] == 'all', ARGV[8], ARGV[9]
local idem, fp = ARGV[11], ARGV[12]

local first = idem_find(TAG, idem, fp)
if first == 'mismatch' then return encode({status = 'idempotency_mismatch'}) end
if first then return idem_replay(first, '') end

local lease, refusal = authorize_lease(ARGV[5], ARGV[6])
if refusal then return refusal end
if reason == 'client_gone' and (lease.nonce == '' or lease.nonce ~= ARGV[10]) then
  -- Another request answered with this grant (or another request made it): it stays.
  return encode({status = 'not_rolled_back'})
end

local function answer(fields)
  local json = encode(fields)
  idem_store(TAG, idem, fp, json, lease.id, '', TOMB)
  return json
end

local h = holder_id(lease.id)
local left
if is_rw(lease.kind) then
  local w = h .. ':write'
  local writes = tonumber(redis.call('HGET', L, w)) or 0
  local reads = tonumber(redis.call('HGET', L, h)) or 0
  local drop_writes, drop_reads = 0, 0
  if all and which == '' then
    drop_writes, drop_reads = writes, reads
  else
    if which == '' then which = (writes > 0) and 'write' or 'read' end
    if (which == 'write' and writes == 0) or (which == 'read' and reads == 0) then
      return encode({status = 'mode_not_held', mode = which})
    end
    if which == 'write' then
      drop_writes = all and writes or 1
    else
      drop_reads = all and reads or 1
    end
  end
  writes = writes - drop_writes
  if writes > 0 then redis.call('HSET', L, w, writes) else redis.call('HDEL', L, w) end
  for i = reads, reads - drop_reads + 1, -1 do redis.call('DEL', rw_timeout_key(h, i)) end
  reads = reads - drop_reads
  if reads > 0 then redis.call('HSET', L, h, reads) else redis.call('HDEL', L, h) end
  left = reads + writes
  if redis.call('HLEN', L) <= 1 then
    redis.call('DEL', L)
    redis.call('PUBLISH', RW_CHANNEL, 0)
  else
    if writes == 0 and redis.call('HGET', L, 'mode') == 'write' then
      -- The downgrade completes: our read holds remain, and other readers may now join.
      redis.call('HSET', L, 'mode', 'read')
      redis.call('PUBLISH', RW_CHANNEL, 0)
    end
    if redis.call('HGET', L, 'mode') == 'read' then
      local longest = max_read_ttl()
      if longest > 0 then redis.call('PEXPIRE', L, longest) end
    end
  end
else
  left = all and 0 or redis.call('HINCRBY', L, h, -1)
  if left > 0 then
    redis.call('PEXPIRE', L, lease.ttl)
  else
    redis.call('DEL', L)
    wake_next()
  end
end

if left > 0 then
  redis.call('HSET', lease.key, 'expires_ms', NOW + lease.ttl)
  touch_lease(lease, lease.ttl + TOMB)
  publish_event({type = 'released', lease_id = lease.id, holder = lease.holder,
    reentry_count = left, reason = reason})
  return answer({status = 'still_held', reentry_count = left})
end
end_lease(lease, 'released')
publish_event({type = 'released', lease_id = lease.id, holder = lease.holder,
  reentry_count = 0, reason = reason})
return answer({status = 'released', kind = lease.kind, held_ms = NOW - (lease.acquired or NOW)})
