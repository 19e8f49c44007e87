-- RedLock leases as the main Redis knows them. The leases live on the RedLock nodes
-- (src/leases/redlock/); the main Redis keeps only which names hold one (for listing and
-- inspecting a name) and when each runs out (for the expiry sweeper, which asks the nodes
-- before it records an expiry). Both keys are Leasehold's own, under the one hash tag
-- {leasehold/} that every key space's own keys share: one Cluster slot.
-- KEYS[1]: the key space's index P[tenant/]{leasehold/}:redlock (zset, every score 0, read
--   by name; member "<name>\t<lease-id>")
-- KEYS[2]: the deployment's due list P{leasehold/}:redlock:due (zset, score = when the lease
--   runs out (Redis ms); member "<rest>\t<lease-id>", rest = the name, or tenant/name)
-- ARGV[1..2]: see prelude.lua. Then:
-- A(1) op: put | end | due
-- A(2) member: put, end: "<name>\t<lease-id>"; due: how many members at most
-- A(3) due_member: put, end: "<rest>\t<lease-id>"
-- A(4) expires_ms: put: when the lease runs out (Redis ms; 0: its TTL from now, A(5))
-- A(5) ttl_ms: put: the lease's TTL, when A(4) is 0
-- Returns JSON: put -> {"status":"put"}; end -> {"status":"ended","removed":0|1} (1 for the
--   one call that took it out: an end is recorded once, whichever instance ends it first);
--   due -> {"status":"due","members":[...],"now_ms":N}. Run twice: put again writes the same,
--   end answers removed 0 (the first run recorded it).
if not begin(KEYS, ARGV) then return TOO_LATE end
local op = A(1)
if op == 'due' then
  local members = redis.call('ZRANGE', STATE, '-inf', NOW_S, 'BYSCORE', 'LIMIT', 0, A(2))
  if #members == 0 then return '{"status":"due","members":[],"now_ms":' .. NOW_S .. '}' end
  return '{"status":"due","members":' .. cjson.encode(members) .. ',"now_ms":' .. NOW_S .. '}'
elseif op == 'put' then
  local expires = A(4)
  if expires == '0' then expires = d(NOW + A(5)) end
  redis.call('ZADD', L, 0, A(2))
  redis.call('ZADD', STATE, expires, A(3))
  return '{"status":"put"}'
elseif op == 'end' then
  redis.call('ZREM', L, A(2))
  return '{"status":"ended","removed":' .. redis.call('ZREM', STATE, A(3)) .. '}'
end
return redis.error_reply('redlock: unknown op ' .. tostring(op))
