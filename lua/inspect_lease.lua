-- Read one lease's state without its token: held (with its counts and time left), queued
-- (a fair ticket: its place), or how it ended (its record, or the lock's history). Changes
-- nothing. KEYS, ARGV[1..2]: see prelude.lua. Then:
-- A(1) lease_id: lease id
-- Returns: JSON {found, state, kind, holder, metadata, fencing_token, ttl_ms, created_ms,
--   expires_ms, ended_ms, reentry_count, read_count, write_count, position, pttl, now_ms,
--   revocation (its record's JSON, as text: see revoke.lua), waiters (while held: how many
--   wait for the lock)}
lock_begin(KEYS, ARGV)
local id = A(1)
local rec = load(id, true)
if not rec then
  local ended = find_ended(id)
  if not ended or ended.kind == 'semaphore' then return '{"found":false}' end
  return encode({found = true, state = ended.state, kind = ended.kind, holder = ended.holder,
    fencing_token = ended.fence, created_ms = ended.since, ended_ms = ended.ended,
    reentry_count = 0, pttl = redis.call('PTTL', L), now_ms = NOW, revocation = revocation_of(id)})
end
if rec.kind == 'semaphore' then return '{"found":false}' end
local h = holder_id(id)
local reads, writes = 0, 0
if rec.state == 'held' then
  reads, writes = held_levels(rec)
  if is_rw(rec.kind) and reads > 0 and writes == 0 and not reader_alive(h, reads) then
    reads = 0
  end
end
local state, ended = rec.state, tonumber(rec.ended)
local position
if state == 'held' and reads + writes == 0 then
  state = 'expired'
  ended = math.min(tonumber(rec.expires) or NOW, NOW)
elseif state == 'queued' then
  local deadline = tonumber(redis.call('ZSCORE', timeouts_key(), h))
  if not deadline or deadline <= NOW then
    state = 'expired'
    ended = deadline
  else
    position = redis.call('LPOS', queue_key(), h)
    position = position and position + 1
  end
end
local fence, expires = tonumber(rec.fence), tonumber(rec.expires)
local waiters
if state == 'held' then waiters = waiting_count(redis.call('LLEN', queue_key())) end
return encode({found = true, state = state, kind = rec.kind, holder = rec.holder,
  metadata = rec.meta, fencing_token = (fence ~= 0) and fence or nil,
  ttl_ms = tonumber(rec.ttl), created_ms = tonumber(rec.since),
  expires_ms = (expires ~= 0) and expires or nil, ended_ms = ended,
  reentry_count = reads + writes, read_count = is_rw(rec.kind) and reads or nil,
  write_count = is_rw(rec.kind) and writes or nil, position = position,
  pttl = redis.call('PTTL', L), now_ms = NOW, revocation = revocation_of(id), waiters = waiters})
