-- A multilease's record: which locks it holds (each member is an ordinary lease of its lock,
-- taken by its own acquire call), its TTL and state, so that any instance can renew, release,
-- show or watch it by its id alone. Also an Idempotency-Key's claim on a multilease. The
-- record lives in Leasehold's own key space, under a hash tag of its own (a lock name never
-- ends with `/`), so multileases spread over a cluster's slots.
-- KEYS[1] = KEYS[2]: the record P{leasehold/<lease-id>/}:multilease, or for op `claim` and
--   `unclaim` the key's claim P{leasehold/<key-sha256>/}:multilease-key. ARGV[1..2]: see
--   prelude.lua. Then:
-- A(1) op: put | renew | end | get | claim | unclaim
-- A(2) lease_id: the multilease's id
-- A(3) ttl_ms: put, renew: the TTL; claim: how long the claim is kept (ms)
-- A(4) body: put: the members and labels as JSON (kept as sent); end: the state it ended in
--       (released | expired | force_released); claim: the request's fingerprint
-- A(5) detail: end: the member whose loss ended it ("" for a release); claim: the token sealed
--       under the key
-- Returns: JSON with status = put | renewed | ended | found | new | claimed | unclaimed |
--   unknown | lost | too_late. Run twice (a lost reply, re-sent): put answers put again, end
--   answers ended with the first end's state, renew extends once more (as a heartbeat does).
if not begin(KEYS, ARGV) then return TOO_LATE end
local op, id, ttl = A(1), A(2), A(3)
local rec = L
if op == 'claim' then
  local got = redis.call('HMGET', rec, 'id', 'fp', 'sealed')
  if got[1] then
    return '{"status":"claimed","lease_id":' .. js(got[1]) .. ',"fingerprint":' .. js(got[2])
      .. ',"sealed":' .. js(got[3]) .. '}'
  end
  redis.call('HSET', rec, 'id', id, 'fp', A(4), 'sealed', A(5))
  redis.call('PEXPIRE', rec, ttl)
  return '{"status":"new"}'
elseif op == 'unclaim' then
  if redis.call('HGET', rec, 'id') == id then redis.call('DEL', rec) end
  return '{"status":"unclaimed"}'
end
local got = redis.call('HMGET', rec, 'id', 'state', 'body', 'ttl', 'since', 'expires', 'ended',
  'member')
local function view(status)
  return '{"status":"' .. status .. '","lease_id":' .. js(got[1]) .. ',"state":' .. js(got[2])
    .. ',"body":' .. got[3] .. ',"ttl_ms":' .. got[4] .. ',"acquired_ms":' .. got[5]
    .. ',"expires_ms":' .. got[6] .. ',"ended_ms":' .. jt(got[7]) .. ',"member":'
    .. jsn(got[8]) .. ',"now_ms":' .. NOW_S .. '}'
end
if op == 'put' then
  if got[1] then return view('put') end
  local expires = d(NOW + ttl)
  redis.call('HSET', rec, 'id', id, 'state', 'held', 'body', A(4), 'ttl', ttl, 'since', NOW_S,
    'expires', expires)
  redis.call('PEXPIRE', rec, ttl + TOMB)
  got = {id, 'held', A(4), ttl, NOW_S, expires, false, false}
  return view('put')
end
if not got[1] then return '{"status":"unknown"}' end
if op == 'get' then return view('found') end
if got[2] ~= 'held' then return view('lost') end
if op == 'renew' then
  if ttl == '0' then ttl = got[4] end
  local expires = d(NOW + ttl)
  redis.call('HSET', rec, 'ttl', ttl, 'expires', expires)
  redis.call('PEXPIRE', rec, ttl + TOMB)
  got[4], got[6] = ttl, expires
  return view('renewed')
elseif op == 'end' then
  local member = A(5) or ''
  redis.call('HSET', rec, 'state', A(4), 'ended', NOW_S, 'member', member)
  redis.call('PEXPIRE', rec, TOMB)
  got[2], got[7], got[8] = A(4), NOW_S, member
  return view('ended')
end
return redis.error_reply('multilease: unknown op ' .. tostring(op))
