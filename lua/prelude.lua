-- Leasehold's Redis Function library, part 1: what every function shares. The library is
-- this file, locklib.lua, semlib.lua, then one function per operation file (acquire.lua,
-- release.lua, ...), assembled and loaded with FUNCTION LOAD by src/locks/scripts/library.rs.
-- Helpers are defined once, when the library loads, not on every call. They cannot see KEYS
-- or ARGV (Redis passes those to each function), so every function first calls begin(),
-- which sets the per-call values below; Redis runs one function at a time.
--
-- Every function takes the same KEYS and the same first ARGV:
-- KEYS[1]: the lock (or semaphore) key L, Redisson's layout
-- KEYS[2]: its state hash {L}:leasehold (fencing counter, lease records, limit); every
--          other key a function touches is built from L (or STATE) with the same hash tag,
--          so in one slot
-- ARGV[1]: the deadline (Redis time, ms) after which the function must change nothing, "0"
--          for none: by then its request has been answered 503, so running it late (delayed
--          by a partition, or queued in a frozen Redis) would act behind its client's back
-- ARGV[2]: how long an ended lease's idempotency record and state stay (ms)
-- The function's own ARGV follow; `A(n)` is its n-th. Each file's header names them in order,
-- `-- A(n) name: what it is`, with the names its Rust twin's `Script::ARGS` lists (a unit
-- test holds the two together).

-- Per-call values, set by begin() (TAG: cleared by begin(), made on first use by tag()).
-- Times come as numbers and as text: Redis's Lua turns a number into text slowly (about a
-- microsecond each), so text that came from Redis or from ARGV is passed on as text, and
-- numbers are formatted only where arithmetic made them. TOMB stays text too: arithmetic
-- converts it where a call needs it (most do not).
local L, STATE, TAG
local TOMB, NOW, NOW_US_S, NOW_S
local ARGS
-- Fields of STATE to write at the end of the call, in one HSET (see flush_state): W[1..WN].
-- One table for every call (a new table per call is garbage to collect).
local W, WN = {}, 0

-- How many entries a lock's history keeps (about: trimmed with MAXLEN ~), and how long the
-- history of a lock nobody touches any more is kept (ms): an hour (at least half of it after
-- its last entry, see append_history), so that a name nobody uses any more leaves nothing
-- in Redis soon (its memory counts against the names quotas for that long; the Rust side's
-- locks::HISTORY_LIFE says the same, checked by a test).
local HISTORY_LENGTH = '300'
local HISTORY_LIFE_MS = 3600000
-- A state hash outlives its longest lease by the tombstone time plus this, so that a busy
-- lock refreshes its expiry now and then rather than on every grant.
local STATE_SLACK_MS = 600000

local function A(n) return ARGS[n + 2] end

-- The hash tag `{L}` every key of the name shares, made when a call first needs it: making a
-- string costs about a microsecond, and the usual acquire needs none (begin() forgets it).
local function tag()
  if not TAG then TAG = '{' .. L .. '}' end
  return TAG
end

-- The lock's history stream, {L}:leasehold:history (built when needed, from STATE, which is
-- {L}:leasehold).
local function history_key() return STATE .. ':history' end

-- Numbers as text (JSON, Redis arguments): `..` would print large ones in exponent form.
local function d(n) return string.format('%d', n) end

-- The lock's pending revocations, {L}:leasehold:revoke (hash: lease id -> JSON {reason, by,
-- at_ms, deadline_ms}; see revoke.lua), and the channel that wakes only the lock's lease
-- watches (a revocation, a late heartbeat, a change in who waits), never its waiters.
local function revoke_key() return STATE .. ':revoke' end
local function watch_channel() return 'leasehold:watch:' .. tag() end

-- Lease `id`'s pending revocation (its JSON) and deadline (ms), or nil.
local function revocation_of(id)
  local rv = redis.call('HGET', revoke_key(), id)
  if not rv then return nil end
  return rv, tonumber(string.match(rv, '"deadline_ms":(%d+)'))
end

-- The TTL (text) a heartbeat of lease `id` may give it: `ttl`, cut so that it ends by its
-- revocation's deadline, if it has one (never below 1 ms: past the deadline, the lease is
-- left to run out); and the revocation's JSON, to tell the holder.
local function ttl_within_revocation(id, ttl)
  local rv, deadline = revocation_of(id)
  if not deadline then return ttl, nil end
  local left = deadline - NOW
  if left < tonumber(ttl) then ttl = d(math.max(left, 1)) end
  return ttl, rv
end

-- How many requests wait for the name now, on any instance: the entries of its waiting list
-- ({L}:leasehold:waiting, see locks::feed::waitlist) not past their deadline, and `queued`
-- (a fair lock's queued tickets, which that list leaves out). RedLock requests are listed
-- there too, but wait for the lock of that name on the RedLock nodes, not this one.
local function waiting_count(queued)
  local n = queued or 0
  for _, e in ipairs(redis.call('HVALS', STATE .. ':waiting')) do
    local until_ms = tonumber(string.match(e, '"until_ms":(%d+)'))
    if until_ms and until_ms > NOW and not string.find(e, '"kind":"redlock"', 1, true) then
      n = n + 1
    end
  end
  return n
end

-- A heartbeat that came with less than half its TTL left may end an `expiring` warning its
-- watch gave (the watch's slack is at most half the TTL): it wakes the lease's watches. An
-- on-time heartbeat publishes nothing.
local function late_heartbeat(slack, old_ttl)
  if slack * 2 <= (tonumber(old_ttl) or 0) then redis.call(PUBLISH, watch_channel(), '0') end
end

-- Sets the per-call values; returns false when the deadline has passed (change nothing).
-- (Text becomes a number with `+ 0`: tonumber() converts it twice.)
local function begin(keys, argv)
  L, STATE, ARGS = keys[1], keys[2], argv
  TAG = nil
  -- Time comes from Redis so that every Leasehold instance uses one clock.
  local t = redis.call('TIME')
  local us = t[2]
  if #us < 6 then us = string.sub('000000', #us + 1) .. us end
  NOW_US_S = t[1] .. us
  NOW_S = string.sub(NOW_US_S, 1, -4)
  NOW = NOW_S + 0
  TOMB = argv[2]
  WN = 0
  local deadline = argv[1]
  return deadline == '0' or NOW <= deadline + 0
end

-- A JSON string (escaped), or null for none.
local function js(s) return cjson.encode(s) end
local function jsn(s)
  if s == nil or s == false or s == '' or s == cjson.null then return 'null' end
  return cjson.encode(s)
end
-- A number held as text (or none) as JSON.
local function jt(t)
  if t == nil or t == false or t == '' then return 'null' end
  return t
end

-- cjson writes numbers with 14 significant digits; fencing tokens have 16. Large integers
-- travel as marked strings and lose their quotes after encoding. For the rarer, larger
-- replies only; the frequent ones are built with `..`.
local function exact(v)
  if type(v) == 'number' and (v >= 1e14 or v <= -1e14) then
    return '\1' .. string.format('%d', v)
  elseif type(v) == 'table' then
    local out = {}
    for k, x in pairs(v) do out[k] = exact(x) end
    return out
  end
  return v
end

local function encode(t)
  return (string.gsub(cjson.encode(exact(t)), '"\\u0001(%-?%d+)"', '%1'))
end

-- Queues one field of STATE for the one HSET at the end of the call.
local function set_state(field, value)
  W[WN + 1], W[WN + 2] = field, value
  WN = WN + 2
end

-- Queues the state's new expiry when `keep_until` (ms: the state must stay at least until
-- then) is later than the recorded one, `sexp` (from the call's first read), with slack, so a
-- busy lock pays for it now and then; returns the PEXPIRE's argument to send once the fields
-- are written, or nil.
local function renewal(keep_until, sexp)
  if keep_until > (sexp and sexp + 0 or 0) then
    set_state('sexp', d(keep_until + STATE_SLACK_MS))
    return d(keep_until + STATE_SLACK_MS - NOW)
  end
  return nil
end

-- Writes the queued fields, and renews the state's expiry (see renewal). `keep_until` nil:
-- no expiry (semaphores: Redisson's counter never expires, and their limit lives here).
local function flush_state(keep_until, sexp)
  local pexpire = keep_until and renewal(keep_until, sexp)
  if WN > 0 then
    redis.call('HSET', STATE, unpack(W, 1, WN))
    WN = 0
  end
  if pexpire then redis.call('PEXPIRE', STATE, pexpire) end
end

-- The next fencing token after `last` (text), as text: one more, and never below Redis's
-- clock in microseconds. A counter that Redis lost (a restart without persistence, an AOF
-- short of its last second, a failover to a replica that lagged, a state hash that expired)
-- therefore still never hands out a token at or below one it gave before, as long as Redis's
-- clock has not gone back past it (see the README).
local function next_fence(last)
  local f = (last and last + 0 or 0) + 1
  if NOW_US_S + 0 >= f then return NOW_US_S end
  return d(f)
end

-- Appends one entry (JSON) to the lock's capped history (`{L}:leasehold:history`, field `e`),
-- so the history survives restarts and every instance sees the same one. The history is kept
-- for HISTORY_LIFE_MS after its last refresh; `hexp` (from the call's first read of STATE) says
-- when that refresh is due (half-way), so it costs a PEXPIRE every half hour, not on every
-- entry, and the history stays between half and all of HISTORY_LIFE_MS after its last entry.
-- `by`: the nonce of the request whose call wrote the entry (a release, a leave, an admin's
-- action), kept in a field of its own, `r`, beside the JSON (never shown): that call, run again
-- (see "Run twice" below), finds its entry and answers as it did.
local function append_history(json, hexp, by)
  local key = history_key()
  if by and by ~= '' then
    redis.call('XADD', key, 'MAXLEN', '~', HISTORY_LENGTH, '*', 'e', json, 'r', by)
  else
    redis.call('XADD', key, 'MAXLEN', '~', HISTORY_LENGTH, '*', 'e', json)
  end
  if (hexp and hexp + 0 or 0) < NOW then
    redis.call('PEXPIRE', key, HISTORY_LIFE_MS)
    set_state('hexp', d(NOW + HISTORY_LIFE_MS / 2))
  end
end

-- @part records
-- A holder id that Redisson's ports to other languages write: the client's UUID, a colon,
-- then any id of the holder (a goroutine's number, another UUID, ...), `:write` or not.
local PORT_HOLDER = '^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x:.'

-- Whether the hash `key` is a lock in Redisson's layout (ours or a Redisson client's): every
-- field is `mode` (read or write) or a holder id with a count: `<id>:<n>` (`<id>:<n>:write`)
-- as Redisson's Java client writes it, or `<uuid>:<id>` as its ports do (PORT_HOLDER).
-- Anything else is some other program's hash, which Leasehold neither reads out nor changes.
local function hash_is_lock(key)
  local flat = redis.call('HGETALL', key)
  for i = 1, #flat, 2 do
    local f, v = flat[i], flat[i + 1]
    if f == 'mode' then
      if v ~= 'read' and v ~= 'write' then return false end
    elseif not ((string.find(f, '^.+:%d+$') or string.find(f, '^.+:%d+:write$')
        or string.find(f, PORT_HOLDER))
      and string.find(v, '^%d+$')) then
      return false
    end
  end
  return true
end

-- Redisson's holder id for a lease: "<lease-id>:1" (Redisson: "<client-uuid>:<thread-id>").
local function holder_id(id) return id .. ':1' end

-- Idempotency records: a retry of a request (same Idempotency-Key, same request) gets the
-- first answer instead of acting twice. `digest` is the sha256 of the client's key, so key
-- names never carry it; `fp` the sha256 of what the request asked.
local function idem_key(digest) return tag() .. ':leasehold:idem:' .. digest end

-- The first answer to a key: (reply JSON, lease id, sealed token, the nonce of the request
-- that got it), or 'mismatch' when the key came with another request, or nil.
local function idem_find(digest, fp)
  if digest == '' then return nil end
  local rec = redis.call('HMGET', idem_key(digest), 'fp', 'reply', 'lease', 'sealed', 'by')
  if not rec[1] then return nil end
  if rec[1] ~= fp then return 'mismatch' end
  return rec[2], rec[3] or '', rec[4] or '', rec[5] or ''
end

-- Keeps the answer to a key for `life_ms`; `by`: the nonce of the request answered (the
-- same call run again gets its answer as it was, not marked replayed).
local function idem_store(digest, fp, reply, lease_id, sealed, life_ms, by)
  if digest == '' then return end
  local key = idem_key(digest)
  redis.call('HSET', key, 'fp', fp, 'reply', reply, 'lease', lease_id or '', 'sealed',
    sealed or '', 'by', by or '')
  redis.call('PEXPIRE', key, life_ms)
end

-- Returns `reply`, kept first as the answer to key `digest` (if any): see idem_store.
local function idem_answer(digest, fp, reply, lease_id, sealed, life_ms, by)
  idem_store(digest, fp, reply, lease_id, sealed, life_ms, by)
  return reply
end

-- A stored answer, marked as replayed (with the first lease's token, sealed under the key).
local function idem_replay(reply, sealed)
  local extra = ',"replayed":true'
  if sealed ~= '' then extra = extra .. ',"sealed":"' .. sealed .. '"' end
  return string.sub(reply, 1, -2) .. extra .. '}'
end

local TOO_LATE = '{"status":"too_late"}'

-- Run twice. redis-rs re-sends a command whose connection dropped (the Cluster client, up to
-- 16 times), so a call that ran but whose reply was lost runs again, with the same KEYS and
-- ARGV: the same lease id, nonce, Idempotency-Key and deadline. Every function that changes
-- state answers such a second run as the first run did and changes nothing more. A request
-- is known by what it already left: a new lease by its record (its id comes from a token made
-- for the request), a reentry or a released level by the request's nonce kept as the lease's
-- record's nonce, an end (release, leave, admin action) by its history entry, which keeps the
-- nonce of the request that wrote it (append_history). Those checks cost the usual call
-- nothing or a field it reads anyway; the history is read only where a call finds its lease
-- gone, or by an admin's call. Not made exact: a heartbeat (run again, it extends the lease
-- once more, from a little later, and records one more entry) and the sweep (run again, it
-- finds nothing left to record). Not recognised: a reentry or released level run again after
-- another reentry or release of the same lease (the record keeps the last request's nonce);
-- a new lease's grant run again after that lease ended (rolled back, expired, evicted) on a
-- name left free (granted again, and held until its TTL, as a crashed client's lease is); an
-- end pushed out of the capped history.

-- Whether `nonce` names the request that made `by` (both nonces; "" is nobody).
local function same_request(by, nonce) return nonce ~= '' and by == nonce end

-- The history entry (JSON) the call of request `nonce` wrote, or nil: an admin's call run
-- again (see "Run twice") answers from it.
local function entry_by(nonce)
  if nonce == '' then return nil end
  local entries = redis.call('XREVRANGE', history_key(), '+', '-', 'COUNT', HISTORY_LENGTH)
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    if fields[3] == 'r' and fields[4] == nonce then return fields[2] end
  end
  return nil
end

-- The answer of an admin's removal (force release, eviction) whose history entry is `json`:
-- what that call answered, for it run again (see "Run twice").
local function removed_again(json)
  return '{"status":"force_released","holders":' .. encode(cjson.decode(json).holders)
    .. ',"ev":[' .. json .. ']}'
end

-- The answer of a release whose lease ended with history entry `ended` (see find_ended): what
-- that call answered, for it run again (see "Run twice").
local function released_again(ended)
  local since = ended.since
  return '{"status":"released","kind":"' .. ended.kind .. '","since_ms":'
    .. (type(since) == 'number' and d(since) or 'null') .. ',"now_ms":' .. d(ended.ended)
    .. ',"ev":[' .. ended.json .. ']}'
end
