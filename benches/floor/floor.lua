#!lua name=leasehold_floor
-- A reference for BENCHMARKS.md §2, not a lock anyone should use: the least an uncontended
-- reentrant acquire + release can ask of Redis while keeping every feature Leasehold's cycle
-- has (issue 10: "every feature stays"), so that the report can split Leasehold's cost over
-- the minimal pair into what those features need and what the general scripts add.
--
-- Kept, in the same Redis layout and with the same record, history entry and replies as
-- lua/acquire.lua and lua/release.lua write for this cycle:
-- - Redisson's RLock layout and wake-up: the holder field `<lease>:1` in L with its PEXPIRE;
--   on release DEL and PUBLISH 0 on redisson_lock__channel:{L};
-- - the deadline after which a call changes nothing (ARGV[1]), against Redis's clock (TIME);
-- - a fencing token one above the last and never below Redis's clock in microseconds;
-- - the lease record in the state hash {L}:leasehold (`lease`, `rec`, `fence`), with the
--   request's nonce for the rollback of an unreceived grant;
-- - the release checks that the token's lease is the recorded one and still holds L;
-- - the history entry appended to {L}:leasehold:history (XADD MAXLEN ~ 300), also returned
--   in the reply's `ev` for the live events;
-- - JSON replies.
-- - the state hash and the history expire when unused, renewed as Leasehold renews them: the
--   state records when each expiry is next due (`sexp`, `hexp`), so that a PEXPIRE (which
--   costs Redis more than reading that field) runs now and then, not on every call.
-- Left out: everything the cycle does not need when the name is a free reentrant lock and
-- no Idempotency-Key is sent: other kinds and their conflicts, fair queues, reentry, expiry
-- noticed late, holder labels and metadata, idempotency records.
--
-- KEYS[1] = L, KEYS[2] = {L}:leasehold
-- floor_acquire: ARGV = deadline (ms, "0": none), ttl (ms), lease id, nonce, how long the
--   state outlives the lease at least (ms: the tombstone time)
-- floor_release: ARGV = deadline (ms, "0": none), lease id

-- How long a lock's history stays after its last renewal, how often that renewal is due,
-- and how much longer than it must the state is kept (ms): Leasehold's.
local HISTORY_LIFE_MS = 7 * 24 * 3600 * 1000
local HISTORY_RENEW_MS = HISTORY_LIFE_MS - 86400000
local STATE_SLACK_MS = 600000

-- Redis's clock as text: microseconds and milliseconds (turning a number into text costs
-- Redis's Lua about a microsecond, so times stay the text Redis gave, as Leasehold's do).
local function clock()
  local t = redis.call('TIME')
  local us = t[2]
  if #us < 6 then us = string.sub('000000', #us + 1) .. us end
  local us_s = t[1] .. us
  return us_s, string.sub(us_s, 1, -4)
end

redis.register_function('floor_acquire', function(KEYS, ARGV)
  local L, STATE = KEYS[1], KEYS[2]
  local deadline, ttl, id, nonce, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
  local us, ns = clock()
  local now = ns + 0
  if deadline ~= '0' and now > deadline + 0 then return '{"status":"too_late"}' end
  if redis.call('EXISTS', L) == 1 then return '{"status":"held"}' end
  redis.call('HSET', L, id .. ':1', '1')
  redis.call('PEXPIRE', L, ttl)
  local v = redis.call('HMGET', STATE, 'fence', 'sexp')
  local fence = (v[1] and v[1] + 1 or 1)
  fence = (us + 0 >= fence) and us or string.format('%d', fence)
  local rec = 'held|reentrant|' .. ttl .. '|' .. ns .. '|' .. string.format('%d', now + ttl) .. '|'
    .. fence .. '|' .. nonce .. '||'
  local keep_until = now + ttl + keep
  if keep_until > (v[2] and v[2] + 0 or 0) then
    redis.call('HSET', STATE, 'fence', fence, 'lease', id, 'rec', rec, 'sexp',
      string.format('%d', keep_until + STATE_SLACK_MS))
    redis.call('PEXPIRE', STATE, ttl + keep + STATE_SLACK_MS)
  else
    redis.call('HSET', STATE, 'fence', fence, 'lease', id, 'rec', rec)
  end
  return '{"status":"acquired","lease_id":"' .. id .. '","kind":"reentrant","reentry_count":1,'
    .. '"fencing_token":' .. fence .. ',"ttl_ms":' .. ttl .. ',"now_ms":' .. ns .. ',"now_us":'
    .. us .. ',"created_ms":' .. ns .. ',"holder":null}'
end)

redis.register_function('floor_release', function(KEYS, ARGV)
  local L, STATE = KEYS[1], KEYS[2]
  local deadline, id = ARGV[1], ARGV[2]
  local _, ns = clock()
  local now = ns + 0
  if deadline ~= '0' and now > deadline + 0 then return '{"status":"too_late"}' end
  local v = redis.call('HMGET', STATE, 'lease', 'rec', 'hexp')
  if v[1] ~= id then return '{"status":"unknown_lease"}' end
  local kind, ttl, since, expires, fence =
    string.match(v[2], '^held|(%l+)|(%d+)|(%d+)|(%d+)|(%d+)|')
  if not kind or not redis.call('HGET', L, id .. ':1') then return '{"status":"lease_lost"}' end
  redis.call('DEL', L)
  redis.call('PUBLISH', 'redisson_lock__channel:{' .. L .. '}', '0')
  local entry = '{"type":"released","lease_id":"' .. id .. '","holder":null,"kind":"' .. kind
    .. '","fencing_token":' .. fence .. ',"since_ms":' .. since .. ',"at_ms":' .. ns
    .. ',"reentry_count":0,"reason":"released"}'
  local history = '{' .. L .. '}:leasehold:history'
  redis.call('XADD', history, 'MAXLEN', '~', '300', '*', 'e', entry)
  local rec = 'released|' .. kind .. '|' .. ttl .. '|' .. since .. '|' .. expires .. '|' .. fence
    .. '||' .. ns .. '|'
  if (v[3] and v[3] + 0 or 0) < now then
    redis.call('PEXPIRE', history, HISTORY_LIFE_MS)
    redis.call('HSET', STATE, 'rec', rec, 'hexp', string.format('%d', now + HISTORY_RENEW_MS))
  else
    redis.call('HSET', STATE, 'rec', rec)
  end
  return '{"status":"released","kind":"' .. kind .. '","since_ms":' .. since .. ',"now_ms":'
    .. ns .. ',"ev":[' .. entry .. ']}'
end)
