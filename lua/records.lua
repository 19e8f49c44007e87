-- Part of prelude.lua (the library puts it where prelude.lua has the line `-- @part
-- records`): the lease records, their packing, loading, saving, ending, and finding how a
-- lease ended in the history.

-- Lease records. The lease holding an exclusive lock (reentrant, exclusive, fair) is recorded
-- in fixed fields of STATE: `lease` (its id), `rec`, `holder`, `meta`; the next such lease
-- overwrites them, so a release costs no delete. Leases that share (read, write, semaphore)
-- and fair tickets still queued are recorded as `r:<id>`, `h:<id>`, `m:<id>`, removed when
-- they end. An ended lease's last word is its history entry (see find_ended).
-- `rec` packs: state|kind|ttl|since|expires|fence|nonce|ended|permits (numbers as text, and
-- kept as text in the tables below: convert with tonumber for arithmetic)
--   state: held, queued, released, expired, force_released, left
--   since: when it was granted (or queued, for a ticket); ended: when it ended
--   nonce: a request's (see "Run twice" below): the one that made the grant (or queued the
--     ticket), which alone may roll it back, until another request answers with it (then
--     ""); then the last reentry's or released level's; once ended, the release's or leave's
--     ("" for an expiry or an admin's removal)
local REC_PATTERN = '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$'

local function unpack_rec(id, packed, holder, meta, shared)
  if not packed then return nil end
  local state, kind, ttl, since, exp, fence, nonce, ended, permits =
    string.match(packed, REC_PATTERN)
  return {id = id, state = state, kind = kind, ttl = ttl, since = since, expires = exp,
    fence = fence, nonce = nonce, ended = ended ~= '' and ended or nil,
    permits = permits ~= '' and permits or nil, holder = holder or nil, meta = meta or nil,
    shared = shared}
end

-- A record's fields packed (see REC_PATTERN).
local function pack(state, kind, ttl, since, exp, fence, nonce, ended, permits)
  return state .. '|' .. kind .. '|' .. ttl .. '|' .. since .. '|' .. exp .. '|' .. fence .. '|'
    .. (nonce or '') .. '|' .. (ended or '') .. '|' .. (permits or '')
end

local function pack_rec(r)
  return pack(r.state, r.kind, r.ttl, r.since, r.expires, r.fence, r.nonce, r.ended, r.permits)
end

-- Reads lease `id`'s record and, in the same call, what every function needs of STATE:
-- returns (record or nil, st) where st has `lease` (the id in the fixed fields; current(st)
-- is its record), `kind` (its family), `fence` (the last fencing token), `q` (our fair queue
-- may have waiters), `sexp` (the state's recorded expiry), `hexp` (when the history's expiry
-- is due for a refresh), and with `all`, `limit` (a semaphore's size). Every field read costs
-- (about a microsecond each, in Redis), so the rarely needed ones come only with `all`: the
-- limit, and the metadata of the lease in the fixed fields (`all` = 'meta': that alone); a
-- shared record is read whole, in a second read, only when the lease is not the one in the
-- fixed fields. `id` "" reads only what every function needs (a new lease has no record
-- yet). `shared`: the lease's record is a shared one (a semaphore's leases always are), or may
-- be (a new fair or read/write lease's, run again), read in the same HMGET rather than a
-- second one (`all` = 'meta' reads meta after it; no other `all`). `known`
-- (with `shared`): what the caller read of STATE already, `lease`, `rec`, `holder`, `q`,
-- `hexp` in that order (release's first read), so that only the other six fields are read
-- rather than all eleven again.
local function load(id, all, shared, known)
  local v
  local r1, r2, r3
  if shared and id ~= '' and known then
    local k = redis.call('HMGET', STATE, 'kind', 'fence', 'sexp', 'r:' .. id, 'h:' .. id,
      'm:' .. id)
    v = {known[1], known[2], known[3], k[1], k[2], known[4], k[3], known[5]}
    r1, r2, r3 = k[4], k[5], k[6]
  elseif shared and id ~= '' and all == 'meta' then
    v = redis.call('HMGET', STATE, 'lease', 'rec', 'holder', 'kind', 'fence', 'q', 'sexp',
      'hexp', 'r:' .. id, 'h:' .. id, 'm:' .. id, 'meta')
    -- (Read where `all` reads meta and limit: meta moves there, the limit is not read.)
    r1, r2, r3, v[9], v[10], v[11], v[12] = v[9], v[10], v[11], v[12], nil, nil, nil
  elseif shared and id ~= '' then
    v = redis.call('HMGET', STATE, 'lease', 'rec', 'holder', 'kind', 'fence', 'q', 'sexp',
      'hexp', 'r:' .. id, 'h:' .. id, 'm:' .. id)
    -- (Read where `all` reads meta and limit: neither is read, so those slots are emptied.)
    r1, r2, r3, v[9], v[10], v[11] = v[9], v[10], v[11], nil, nil, nil
  elseif all == 'meta' then
    v = redis.call('HMGET', STATE, 'lease', 'rec', 'holder', 'kind', 'fence', 'q', 'sexp',
      'hexp', 'meta')
  elseif all then
    v = redis.call('HMGET', STATE, 'lease', 'rec', 'holder', 'kind', 'fence', 'q', 'sexp',
      'hexp', 'meta', 'limit')
  else
    v = redis.call('HMGET', STATE, 'lease', 'rec', 'holder', 'kind', 'fence', 'q', 'sexp',
      'hexp')
  end
  local limit = v[10]
  local st = {lease = v[1] or nil, kind = v[4] or nil, fence = v[5], q = v[6] or nil,
    sexp = v[7], hexp = v[8], limit = limit and tonumber(limit) or nil, raw = v}
  local rec
  if v[1] == id then
    rec = unpack_rec(id, v[2], v[3], v[9], false)
    st.cur = rec
  elseif shared then
    if r1 then rec = unpack_rec(id, r1, r2, r3, true) end
  elseif id ~= '' then
    local r = redis.call('HMGET', STATE, 'r:' .. id, 'h:' .. id, 'm:' .. id)
    if r[1] then rec = unpack_rec(id, r[1], r[2], r[3], true) end
  end
  return rec, st
end

-- The record of the lease in the fixed fields (see load), or nil.
local function current(st)
  if st.cur == nil and st.lease then
    local v = st.raw
    st.cur = unpack_rec(v[1], v[2], v[3], v[9], false) or false
  end
  return st.cur or nil
end

-- Queues a record's new state (see set_state). A shared record that ended is removed.
local function save(rec)
  if rec.shared then
    if rec.state == 'held' or rec.state == 'queued' then
      set_state('r:' .. rec.id, pack_rec(rec))
    else
      -- (`y:`: a fair ticket's lock-delay, see acquire.lua.)
      redis.call('HDEL', STATE, 'r:' .. rec.id, 'h:' .. rec.id, 'm:' .. rec.id, 'y:' .. rec.id)
    end
  else
    set_state('rec', pack_rec(rec))
  end
end

-- Queues a new lease's whole record (`packed`): exclusive (the fixed fields) or shared.
-- An empty holder label or metadata is not written where it changes nothing: a shared
-- record's fields are its own (never reused, removed when it ends); the fixed fields are
-- left as they are when `known` (what load() read of STATE, its `raw`) shows them empty.
local function create_packed(id, packed, holder, meta, shared, known)
  holder, meta = holder or '', meta or ''
  if shared then
    set_state('r:' .. id, packed)
    if holder ~= '' then set_state('h:' .. id, holder) end
    if meta ~= '' then set_state('m:' .. id, meta) end
  else
    set_state('lease', id)
    set_state('rec', packed)
    -- (HMGET answers false for a missing field: nil means not read.)
    if holder ~= '' or not known or (known[3] or '') ~= '' then set_state('holder', holder) end
    if meta ~= '' or not known or known[9] == nil or known[9] ~= false and known[9] ~= '' then
      set_state('meta', meta)
    end
  end
end

local function create(rec)
  create_packed(rec.id, pack_rec(rec), rec.holder, rec.meta, rec.shared)
end

-- Queues the record of a lease granted now (no table to build, as create takes).
local function create_held(id, kind, ttl, exp, fence, nonce, holder, meta, shared, permits,
  known)
  create_packed(id, pack('held', kind, ttl, NOW_S, exp, fence, nonce, nil, permits), holder,
    meta, shared, known)
end

-- A lease's (or ticket's) history entry, when it ends: the whole hold in one entry.
local function ended_entry(rec, how, extra)
  return '{"type":"' .. how .. '","lease_id":"' .. rec.id .. '","holder":' .. jsn(rec.holder)
    .. ',"kind":"' .. rec.kind .. '","fencing_token":' .. jt(rec.fence) .. ',"since_ms":'
    .. jt(rec.since) .. ',"at_ms":' .. (rec.ended or NOW_S)
    .. (rec.permits and (',"permits":' .. rec.permits) or '') .. (extra or '') .. '}'
end

-- Ends a record: its new state, saved, and the entry in the history. `at`: when it ended
-- (text; now by default). `by`: the nonce of the request that ended it (a release, a leave),
-- kept as the ended record's nonce and with the entry (see append_history); none for an end
-- nobody asked for (an expiry). Returns the entry (the live event to publish).
local function finish(rec, how, hexp, extra, at, by)
  rec.state = how
  rec.ended = at or NOW_S
  rec.nonce = by or ''
  save(rec)
  local entry = ended_entry(rec, how, extra)
  append_history(entry, hexp, by)
  return entry
end

-- How lease `id` ended, from the lock's history (its newest entry naming it: its own, or an
-- admin action's list of `holders` it removed), for leases whose record is gone:
-- {state, ended, kind, holder, fence, since, permits, by, json} or nil; `by`: the nonce of
-- the request that wrote the entry, if it kept one (see append_history), `json` the entry.
local function find_ended(id)
  local entries = redis.call('XREVRANGE', history_key(), '+', '-', 'COUNT', HISTORY_LENGTH)
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    local json = fields[2]
    if json and string.find(json, id, 1, true) then
      local e = cjson.decode(json)
      local who
      if e.lease_id == id then
        who = e
      elseif type(e.holders) == 'table' then
        for _, h in ipairs(e.holders) do
          if h.lease_id == id then who = h end
        end
      end
      if who and e.type ~= 'granted' and e.type ~= 'queued' then
        return {id = id, state = e.type, ended = e.at_ms, kind = who.kind, holder = who.holder,
          fence = who.fencing_token, since = who.since_ms, permits = who.permits,
          by = fields[3] == 'r' and fields[4] or nil, json = json}
      end
    end
  end
  return nil
end

