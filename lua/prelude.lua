-- Helpers shared by every script; scripts.rs puts this file (and, for lock scripts, fair.lua
-- and rw.lua) in front of each script's text. Time comes from Redis so that every Leasehold
-- instance uses one clock.
local _time = redis.call('TIME')
local NOW = tonumber(_time[1]) * 1000 + math.floor(tonumber(_time[2]) / 1000)

-- How many events a lock's history keeps (about: trimmed with MAXLEN ~), and how long the
-- history of a lock nobody touches any more is kept (ms).
local HISTORY_LENGTH = 300
local HISTORY_LIFE_MS = 7 * 24 * 3600 * 1000

-- Publishes one event (JSON) describing a change this script made, and appends it to the
-- lock's capped history stream (`{L}:leasehold:history`, field `event`), so the history
-- survives restarts and every instance sees the same one. Every script that publishes takes
-- its hash tag ("{L}") as KEYS[3] (see locklib.lua and semlib.lua), so the stream shares the
-- lock's slot.
local function publish_event(channel, lock_name, fields)
  fields.lock = lock_name
  fields.at_ms = NOW
  local json = cjson.encode(fields)
  local history = KEYS[3] .. ':leasehold:history'
  redis.call('XADD', history, 'MAXLEN', '~', HISTORY_LENGTH, '*', 'event', json)
  redis.call('PEXPIRE', history, HISTORY_LIFE_MS)
  redis.call('PUBLISH', channel, json)
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
    'fencing_token', 'ttl_ms', 'expires_ms', 'created_ms', 'permits')
  if not r[1] then return nil end
  return {id = id, key = lease_key(tag, id), tag = tag, state = r[1], kind = r[2] or 'reentrant',
    holder = r[3] or nil, digest = r[4], fence = tonumber(r[5]), ttl = tonumber(r[6]),
    expires = tonumber(r[7]), created = tonumber(r[8]), permits = tonumber(r[9])}
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
-- answerable for `tomb` ms.
local function end_lease(lease, state, tomb, ended_ms)
  redis.call('HSET', lease.key, 'state', state, 'ended_ms', ended_ms or NOW)
  touch_lease(lease, tomb)
end

-- Redisson's holder id for a lease: "<lease-id>:1" (Redisson: "<client-uuid>:<thread-id>").
local function holder_id(id) return id .. ':1' end
