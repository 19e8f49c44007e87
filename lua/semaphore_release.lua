-- Give a semaphore lease's permits back and announce them on redisson_sc:{L} (the number now
-- available, as Redisson's release does), waking waiters. Also rolls back a grant whose
-- client went away (see release.lua). KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) lease_id: lease id
-- A(2) proven: "1" when the presented token proves the lease id
-- A(3) nonce: this request's nonce (a rollback's: the nonce of the request that made the
--       grant): the same call run again answers as it did (see "Run twice" in prelude.lua)
-- The rest are optional; the caller leaves out those at the end that are "" (the usual
-- release sends none of them):
-- A(4) why: why: "" (released), or "client_gone" to roll back an undelivered grant
-- A(5) key_digest: sha256 hex of the request's Idempotency-Key
-- A(6) fingerprint: sha256 hex of what the request asks
-- Returns: JSON with status = released | lease_lost | forbidden | unknown_lease |
--   not_rolled_back | idempotency_mismatch | too_late; released carries kind = semaphore,
--   since_ms and now_ms (the lease's age is their difference), and in `ev` its history entry
--   (run again, the call finds that entry, which keeps its nonce, and answers as it did)
if not semaphore_begin(KEYS, ARGV) then return TOO_LATE end
-- (A(n) is ARGV[n + 2], read directly here: a function call per argument adds up.)
local id, proven, nonce = ARGV[3], ARGV[4] == '1', ARGV[5] or ''
local reason, idem, fp = ARGV[6] or '', ARGV[7] or '', ARGV[8] or ''
if reason == '' then reason = 'released' end
local first, _, _, by = idem_find(idem, fp)
if first == 'mismatch' then return '{"status":"idempotency_mismatch"}' end
-- (This very call run again gets its answer as it was: see "Run twice" in prelude.lua.)
if first and same_request(by, nonce) then return first end
if first then return idem_replay(first, '') end

-- A semaphore lease is recorded in its own fields: with the history's renewal time, all a
-- release reads of STATE (three fields, where load reads eleven). Anything else (no such
-- record) is looked up as every function does, for the same refusals.
local v = redis.call('HMGET', STATE, 'hexp', 'r:' .. id, 'h:' .. id)
local rec, hexp = unpack_rec(id, v[2], v[3], nil, true), v[1]
if not rec then
  local st
  rec, st = load(id, false, true)
  hexp = st.hexp
end
if not proven then
  if rec or find_ended(id) then return '{"status":"forbidden"}' end
  return '{"status":"unknown_lease"}'
end
if not rec then
  -- Released by this very call, run again (see "Run twice" in prelude.lua): its entry says.
  -- (Otherwise the refusal check_permits would make, from the same entry.)
  local ended = find_ended(id)
  if ended and same_request(ended.by, nonce) then return released_again(ended) end
  if ended and ended.kind == 'semaphore' then
    return '{"status":"lease_lost","state":"' .. ended.state .. '"}'
  end
  return '{"status":"unknown_lease"}'
end
local events = {}
local ok, refusal = check_permits(id, rec, hexp, events)
if not ok then return string.sub(refusal, 1, -2) .. ev(events) .. '}' end
if reason == 'client_gone' and (rec.nonce == '' or rec.nonce ~= nonce) then
  return '{"status":"not_rolled_back"}'
end
local permits = tonumber(rec.permits)
local freed
if permits == 1 then
  freed = redis.call('ZREM', TIMEOUT, permit_id(id, 1))
else
  freed = chunked('ZREM', TIMEOUT, {}, permit_ids(id, permits))
end
redis.call('ZREM', HOLDERS, id)
local available = redis.call('INCRBY', L, d(freed))
if available > 0 then redis.call(PUBLISH, SEM_CHANNEL, d(available)) end
local since = rec.since
events[#events + 1] = finish(rec, 'released', hexp, ',"reason":"' .. reason .. '"', nil, nonce)
local json = '{"status":"released","kind":"semaphore","since_ms":' .. jt(since) .. ',"now_ms":'
  .. NOW_S .. ev(events) .. '}'
if idem ~= '' then idem_store(idem, fp, json, id, '', TOMB, nonce) end
return json
