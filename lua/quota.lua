-- What one caller (or one tenant) makes Redis keep, in estimated bytes: each part (a name's
-- state, a lease's record, its permits, a name's history) is a member with its own size and
-- its own end, so the account heals by itself when a part's end passes unseen. The account
-- is a library of its own (limits::budget), not part of the lock functions: it lives under
-- the caller's hash tag, not a lock's.
-- KEYS[1]: the sizes (hash: member -> bytes; field '#' holds their total, '@' when the keys
--          expire, ms since the epoch)
-- KEYS[2]: the ends (zset: member -> end, ms since the epoch)
-- ARGV[1] now: ms since the epoch
-- ARGV[2] cap: bytes the account may hold (0: none)
-- ARGV[3] check: 1 to refuse ops that would grow the total past `cap`, 0 to apply them
-- ARGV[4..]: ops, five arguments each: kind member bytes until most
--   kind: set (the member's size is `bytes`) | add (its size grows by `bytes`, up to `most`)
--         | touch (its end moves to `until`, its size stays) | del (it goes)
--         | room (an instance's advance, last: `most` of it was spent by charges this call
--           brings; it grows back to `bytes` if the total stays within `cap`, else keeps
--           what was not spent)
--   until: the member's end (an end never moves earlier)
-- Returns: {1, total, size of each op's member after it}; {0, total, ms until the first end}
-- when `check` is set and the ops would grow the total past `cap` (then nothing is
-- applied). Ops that only shrink or keep the total are never refused; nor is a room.
-- Each Redis command is called once for all the ops (a call costs more than its arguments),
-- and ends travel as the text they came as.

-- The keys outlive the last part by at least a minute; their expiry moves (by two minutes
-- more than needed) only when a part would outlive it.
local SLACK_MS = 60000

local function charge(keys, args)
  local sizes, ends = keys[1], keys[2]
  local now, cap, check = tonumber(args[1]), tonumber(args[2]), args[3] == '1'
  local fields = {'#', '@'}
  for i = 5, #args, 5 do fields[#fields + 1] = args[i] end
  local read = redis.call('HMGET', sizes, unpack(fields))
  local total, expires = tonumber(read[1] or '0'), tonumber(read[2] or '0')
  -- Parts whose end passed stop counting (a bounded number per call: the rest next time).
  local gone = redis.call('ZRANGEBYSCORE', ends, '-inf', now, 'LIMIT', 0, 64)
  if #gone > 0 then
    local was = redis.call('HMGET', sizes, unpack(gone))
    for k = 1, #gone do total = total - tonumber(was[k] or '0') end
    redis.call('HDEL', sizes, unpack(gone))
    redis.call('ZREM', ends, unpack(gone))
    -- A member swept here and charged again below starts from nothing.
    local swept = {}
    for _, member in ipairs(gone) do swept[member] = true end
    for k = 3, #fields do
      if swept[fields[k]] then read[k] = false end
    end
  end
  if total < 0 then total = 0 end
  -- The new sizes, before anything is written.
  local olds, news, grow = {}, {}, 0
  for i = 4, #args, 5 do
    local k = (i - 4) / 5 + 1
    local kind = args[i]
    local old = tonumber(read[k + 2] or '0')
    local new = old
    if kind == 'set' then
      new = tonumber(args[i + 2])
    elseif kind == 'add' then
      new = math.max(math.min(old + tonumber(args[i + 2]), tonumber(args[i + 4])), old)
    elseif kind == 'del' then
      new = 0
    elseif kind == 'room' then
      -- What the charges before it spent comes out of it; it grows back only if there is
      -- room for it beside everything else (worked out below, after the check).
      new = math.max(old - tonumber(args[i + 4]), 0)
    end
    if new > old and kind ~= 'room' then grow = grow + (new - old) end
    olds[k], news[k] = old, new
  end
  if check and cap > 0 and grow > 0 and total + grow > cap then
    local first = redis.call('ZRANGE', ends, 0, 0, 'WITHSCORES')
    local wait = 1000
    if first[2] then wait = math.max(tonumber(first[2]) - now, 1) end
    return {0, total, wait}
  end
  local hset, zadd, dels, reply, last = {}, {}, {}, {1, 0}, 0
  for i = 4, #args, 5 do
    local k = (i - 4) / 5 + 1
    local kind, member, old, new = args[i], args[i + 1], olds[k], news[k]
    if kind == 'room' then
      local want = tonumber(args[i + 2])
      if want > new and (cap == 0 or total - old + want <= cap) then new = want end
    end
    total = total + new - old
    if kind == 'del' or (kind == 'room' and new == 0) then
      if old > 0 then dels[#dels + 1] = member end
    elseif kind ~= 'touch' or old > 0 then
      if new ~= old then
        hset[#hset + 1] = member
        hset[#hset + 1] = new
      end
      -- (GT never moves an end earlier, and still adds a member not there.)
      zadd[#zadd + 1] = args[i + 3]
      zadd[#zadd + 1] = member
      local untl = tonumber(args[i + 3])
      if untl > last then last = untl end
    end
    reply[#reply + 1] = new
  end
  if #dels > 0 then
    redis.call('HDEL', sizes, unpack(dels))
    redis.call('ZREM', ends, unpack(dels))
  end
  if #zadd > 0 then redis.call('ZADD', ends, 'GT', unpack(zadd)) end
  hset[#hset + 1] = '#'
  hset[#hset + 1] = total
  local extend = last > now and last + SLACK_MS > expires
  if extend then
    expires = last + 3 * SLACK_MS
    hset[#hset + 1] = '@'
    hset[#hset + 1] = expires
  end
  redis.call('HSET', sizes, unpack(hset))
  if extend then
    redis.call('PEXPIREAT', sizes, expires)
    redis.call('PEXPIREAT', ends, expires)
  end
  reply[2] = total
  return reply
end
