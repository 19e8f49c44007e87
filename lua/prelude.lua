-- Helpers shared by every script; scripts.rs puts this file (then locklib.lua for lock
-- scripts, semlib.lua for semaphore scripts) in front of each script's text.
-- Every script takes the same first four ARGV:
-- ARGV[1]: the lock (or semaphore) name as the API shows it (for events)
-- ARGV[2]: the events channel
-- ARGV[3]: how long an ended lease stays answerable (ms)
-- ARGV[4]: the deadline (Redis time, ms) after which the script must change nothing, "0" for
--          none: by then the request has been answered 503, so running it late (delayed by a
--          partition, or queued in a frozen Redis) would act behind its client's back
local NAME, EVENTS, TOMB, DEADLINE = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

-- Time comes from Redis so that every Leasehold instance uses one clock.
local _time = redis.call('TIME')
local NOW_US = tonumber(_time[1]) * 1000000 + tonumber(_time[2])
local NOW = math.floor(NOW_US / 1000)
if DEADLINE > 0 and NOW > DEADLINE then return '{"status":"too_late"}' end

-- How many events a lock's history keeps (about: trimmed with MAXLEN ~), and how long the
-- history of a lock nobody touches any more is kept (ms).
local HISTORY_LENGTH = 300
local HISTORY_LIFE_MS = 7 * 24 * 3600 * 1000

-- cjson writes numbers with 14 significant digits; fencing tokens have 16. Large integers
-- travel as marked strings and lose their quotes after encoding.
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

-- Publishes one event (JSON) describing a change this script made, and appends it to the
-- lock's capped history stream (`{L}:leasehold:history`, field `event`), so the history
-- survives restarts and every instance sees the same one. Every script takes the lock's hash
-- tag ("{L}") as KEYS[3], so the stream shares the lock's slot.
local function publish_event(fields)
  fields.lock = NAME
  fields.at_ms = NOW
  local json = encode(fields)
  local history = KEYS[3] .. ':leasehold:history'
  redis.call('XADD', history, 'MAXLEN', '~', HISTORY_LENGTH, '*', 'event', json)
  redis.call('PEXPIRE', history, HISTORY_LIFE_MS)
  redis.call('PUBLISH', EVENTS, json)
end

-- The next fencing token of the lock (or semaphore) whose state hash is `state`: one more
-- than the last one, and never below Redis's clock in microseconds. A counter that Redis
-- lost (a restart without persistence, an AOF short of its last second, a failover to a
-- replica that lagged) therefore still never hands out a token at or below one it gave
-- before, as long as Redis's clock has not gone back past it (see the README).
local function next_fence(state)
  local f = (tonumber(redis.call('HGET', state, 'fence')) or 0) + 1
  if NOW_US > f then f = NOW_US end
  redis.call('HSET', state, 'fence', f)
  return f
end

-- Digests compared without an early exit, so timing says nothing about how much matched.
local function same_digest(a, b)
  if type(a) ~= 'string' or #a ~= #b then return false end
  local diff = 0
  for i = 1, #a do diff = bit.bor(diff, bit.bxor(string.byte(a, i), string.byte(b, i))) end
  return diff == 0
end

-- Records of one lock or semaphore live under its hash tag `tag` ("{L}"), in its slot.
local function lease_key(tag, id) return tag .. ':leasehold:lease:' .. id end
local function token_key(tag, digest) return tag .. ':leasehold:token:' .. digest end

local function is_rw(kind) return kind == 'read' or kind == 'write' end

-- A lease record as a table, or nil.
local function read_lease(tag, id)
  local r = redis.call('HMGET', lease_key(tag, id), 'state', 'kind', 'holder', 'token_sha256',
    'fencing_token', 'ttl_ms', 'expires_ms', 'created_ms', 'permits', 'grant_nonce',
    'acquired_ms')
  if not r[1] then return nil end
  return {id = id, key = lease_key(tag, id), tag = tag, state = r[1], kind = r[2] or 'reentrant',
    holder = r[3] or nil, digest = r[4], fence = tonumber(r[5]), ttl = tonumber(r[6]),
    expires = tonumber(r[7]), created = tonumber(r[8]), permits = tonumber(r[9]),
    nonce = r[10] or '', acquired = tonumber(r[11]) or tonumber(r[8])}
end

-- Creates the record of a new lease (or queued ticket) and its token index.
local function create_lease(tag, id, fields, digest, life_ms)
  local key = lease_key(tag, id)
  local flat = {}
  for k, v in pairs(fields) do
    flat[#flat + 1] = k
    flat[#flat + 1] = v
  end
  redis.call('HSET', key, 'token_sha256', digest, 'created_ms', NOW, unpack(flat))
  redis.call('PEXPIRE', key, life_ms)
  redis.call('SET', token_key(tag, digest), id, 'PX', life_ms)
end

-- Keeps a lease record (and its token index) alive for `life_ms` more.
local function touch_lease(lease, life_ms)
  redis.call('PEXPIRE', lease.key, life_ms)
  redis.call('PEXPIRE', token_key(lease.tag, lease.digest), life_ms)
end

-- Marks a lease ended (released, expired, force_released, left) and keeps its record
-- answerable for TOMB ms.
local function end_lease(lease, state, ended_ms)
  redis.call('HSET', lease.key, 'state', state, 'ended_ms', ended_ms or NOW, 'grant_nonce', '')
  touch_lease(lease, TOMB)
end

-- Whether the hash `key` is a lock in Redisson's layout (ours or a Redisson client's): every
-- field is `mode` (read or write) or a holder id (`<id>:<n>`, `<id>:<n>:write`) with a count.
-- Anything else is some other program's hash, which Leasehold neither reads out nor changes.
local function hash_is_lock(key)
  local flat = redis.call('HGETALL', key)
  for i = 1, #flat, 2 do
    local f, v = flat[i], flat[i + 1]
    if f == 'mode' then
      if v ~= 'read' and v ~= 'write' then return false end
    elseif not ((string.find(f, '^.+:%d+$') or string.find(f, '^.+:%d+:write$'))
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
local function idem_key(tag, digest) return tag .. ':leasehold:idem:' .. digest end

-- The first answer to a key: (reply JSON, lease id, sealed token), or 'mismatch' when the
-- key came with another request, or nil.
local function idem_find(tag, digest, fp)
  if digest == '' then return nil end
  local rec = redis.call('HMGET', idem_key(tag, digest), 'fp', 'reply', 'lease', 'sealed')
  if not rec[1] then return nil end
  if rec[1] ~= fp then return 'mismatch' end
  return rec[2], rec[3] or '', rec[4] or ''
end

-- Keeps the answer to a key for `life_ms`.
local function idem_store(tag, digest, fp, reply, lease_id, sealed, life_ms)
  if digest == '' then return end
  local key = idem_key(tag, digest)
  redis.call('HSET', key, 'fp', fp, 'reply', reply, 'lease', lease_id or '', 'sealed',
    sealed or '')
  redis.call('PEXPIRE', key, life_ms)
end

-- A stored answer, marked as replayed (with the first lease's token, sealed under the key).
local function idem_replay(reply, sealed)
  local extra = ',"replayed":true'
  if sealed ~= '' then extra = extra .. ',"sealed":"' .. sealed .. '"' end
  return string.sub(reply, 1, -2) .. extra .. '}'
end
