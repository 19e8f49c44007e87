-- What one caller (or one tenant) makes Redis keep, in estimated bytes: each part (a name's
-- state, a lease's record, its permits, a name's history) is a member with its own size and
-- its own end, so the account heals by itself when a part's end passes unseen. The account
-- is a library of its own (limits::budget), not part of the lock functions: it lives under
-- the caller's hash tag, not a lock's.
-- KEYS[1]: the sizes (hash: member -> bytes; field '#' holds their total)
-- KEYS[2]: the ends (zset: member -> end, ms since the epoch)
-- ARGV[1] now: ms since the epoch
-- ARGV[2] cap: bytes the account may hold (0: none, nothing refused)
-- ARGV[3..]: ops, five arguments each: kind member bytes until most
--   kind: set (the member's size is `bytes`) | add (its size grows by `bytes`, up to `most`)
--         | touch (its end moves to `until`, its size stays) | del (it goes)
--   until: the member's end (an end never moves earlier)
-- Returns: {1, total} when applied; {0, total, ms until the first end} when `cap` is set and
-- the ops would grow the total past it (then nothing is applied). Ops that only shrink or
-- keep the total are never refused.

local function charge(keys, args)
  local sizes, ends = keys[1], keys[2]
  local now, cap = tonumber(args[1]), tonumber(args[2])
  local total = tonumber(redis.call('HGET', sizes, '#') or '0')
  -- Parts whose end passed stop counting (a bounded number per call: the rest next time).
  local gone = redis.call('ZRANGEBYSCORE', ends, '-inf', now, 'LIMIT', 0, 64)
  for _, member in ipairs(gone) do
    total = total - tonumber(redis.call('HGET', sizes, member) or '0')
    redis.call('HDEL', sizes, member)
    redis.call('ZREM', ends, member)
  end
  if total < 0 then total = 0 end
  -- The new sizes, before anything is written.
  local plan, grow = {}, 0
  for i = 3, #args, 5 do
    local kind, member = args[i], args[i + 1]
    local bytes, untl, most = tonumber(args[i + 2]), tonumber(args[i + 3]), tonumber(args[i + 4])
    local old = tonumber(redis.call('HGET', sizes, member) or '0')
    local new = old
    if kind == 'set' then
      new = bytes
    elseif kind == 'add' then
      new = math.min(old + bytes, most)
      if new < old then new = old end
    elseif kind == 'del' then
      new = 0
    end
    if new > old then grow = grow + (new - old) end
    plan[#plan + 1] = {kind, member, old, new, untl}
  end
  if cap > 0 and grow > 0 and total + grow > cap then
    local first = redis.call('ZRANGE', ends, 0, 0, 'WITHSCORES')
    local wait = 1000
    if first[2] then wait = math.max(tonumber(first[2]) - now, 1) end
    return {0, total, wait}
  end
  local last = 0
  for _, p in ipairs(plan) do
    local kind, member, old, new, untl = p[1], p[2], p[3], p[4], p[5]
    total = total + new - old
    if kind == 'del' then
      redis.call('HDEL', sizes, member)
      redis.call('ZREM', ends, member)
    elseif kind ~= 'touch' or old > 0 then
      if new ~= old then redis.call('HSET', sizes, member, new) end
      -- (GT never moves an end earlier, and still adds a member not there.)
      redis.call('ZADD', ends, 'GT', untl, member)
      if untl > last then last = untl end
    end
  end
  redis.call('HSET', sizes, '#', total)
  -- The account outlives its last part by a minute; an end never moves the keys' expiry
  -- earlier.
  if last > now then
    for _, key in ipairs({sizes, ends}) do
      redis.call('PEXPIRE', key, last - now + 60000, 'NX')
      redis.call('PEXPIRE', key, last - now + 60000, 'GT')
    end
  end
  return {1, total}
end
