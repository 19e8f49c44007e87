-- Read one lease's state without its token: held (with its counts and time left), queued
-- (a fair ticket: its place), or how it ended. Changes nothing. KEYS: see locklib.lua.
-- ARGV[1..4]: see prelude.lua.
-- ARGV[5]: lease id
-- Returns: JSON {found, state, kind, holder, metadata, fencing_token, ttl_ms, created_ms,
--   expires_ms, ended_ms, reentry_count, read_count, write_count, position, pttl, now_ms}
local lease = read_lease(TAG, ARGV[5])
if not lease or lease.kind == 'semaphore' then return encode({found = false}) end
local rec = redis.call('HMGET', lease.key, 'metadata', 'ended_ms', 'acquired_ms')
local h = holder_id(lease.id)
local reads, writes = 0, 0
if redis.call('TYPE', L).ok ~= 'hash' then
  -- The name is a semaphore (or another program's key) by now: the lease holds nothing.
  reads = 0
elseif is_rw(lease.kind) then
  reads = tonumber(redis.call('HGET', L, h)) or 0
  writes = tonumber(redis.call('HGET', L, h .. ':write')) or 0
  if reads > 0 and writes == 0 and not reader_alive(h, reads) then reads = 0 end
elseif redis.call('HEXISTS', L, 'mode') == 0 then
  reads = tonumber(redis.call('HGET', L, h)) or 0
end
local state, ended = lease.state, tonumber(rec[2])
local position
if state == 'held' and reads + writes == 0 then
  state = 'expired'
  ended = lease.expires
elseif state == 'queued' then
  local deadline = tonumber(redis.call('ZSCORE', TIMEOUTS, h))
  if not deadline or deadline <= NOW then
    state = 'expired'
    ended = deadline
  else
    position = redis.call('LPOS', QUEUE, h)
    position = position and position + 1
  end
end
return encode({found = true, state = state, kind = lease.kind, holder = lease.holder,
  metadata = rec[1] or nil, fencing_token = lease.fence, ttl_ms = lease.ttl,
  created_ms = lease.acquired, expires_ms = lease.expires, ended_ms = ended,
  reentry_count = reads + writes, read_count = is_rw(lease.kind) and reads or nil,
  write_count = is_rw(lease.kind) and writes or nil, position = position,
  pttl = redis.call('PTTL', L), now_ms = NOW})
