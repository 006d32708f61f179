package lsnstore

import "github.com/redis/go-redis/v9"

// luaPrelude holds the functions shared by the scripts. A position is the
// text of Position.String: a main lane "X/Y", then "+name=X/Y" per named
// lane. Each half of "X/Y" has at most eight hex digits, so tonumber(h, 16)
// is exact in a Lua number (a double). A parsed position is a table
// {h, l, t, lanes}: t is the text of the main lane, lanes maps a name to
// {h, l, t}.
const luaPrelude = `
local function lsn(v)
  local h, l = string.match(v, "^(%x+)/(%x+)$")
  if not h or #h > 8 or #l > 8 then return nil end
  return tonumber(h, 16), tonumber(l, 16)
end

local function less(a, b)
  return a.h < b.h or (a.h == b.h and a.l < b.l)
end

local function parse(v)
  if not v then return nil end
  local head, rest = string.match(v, "^([^+]*)(.*)$")
  local h, l = lsn(head)
  if not h then return nil end
  local p = {h = h, l = l, t = head, lanes = {}, n = 0}
  if rest == "" then return p end
  if string.sub(rest, -1) == "+" then return nil end
  for item in string.gmatch(rest, "%+([^+]*)") do
    local name, val = string.match(item, "^([%w:_-]+)=(.+)$")
    if not name or #name > 96 or p.lanes[name] then return nil end
    local vh, vl = lsn(val)
    if not vh then return nil end
    p.lanes[name] = {h = vh, l = vl, t = val}
    p.n = p.n + 1
  end
  return p
end

local function text(p)
  local names = {}
  for name, v in pairs(p.lanes) do
    if v.h > 0 or v.l > 0 then names[#names + 1] = name end
  end
  table.sort(names)
  local parts = {p.t}
  for _, name in ipairs(names) do
    parts[#parts + 1] = "+" .. name .. "=" .. p.lanes[name].t
  end
  return table.concat(parts)
end

-- covers reports whether a is at least b in every lane.
local function covers(a, b)
  if less(a, b) then return false end
  for name, v in pairs(b.lanes) do
    local o = a.lanes[name]
    if (v.h > 0 or v.l > 0) and (not o or less(o, v)) then return false end
  end
  return true
end

-- merge returns the per-lane maximum of a and b.
local function merge(a, b)
  local m = a
  if less(a, b) then m = b end
  local out = {h = m.h, l = m.l, t = m.t, lanes = {}}
  for name, v in pairs(a.lanes) do out.lanes[name] = v end
  for name, v in pairs(b.lanes) do
    local o = out.lanes[name]
    if not o or less(o, v) then out.lanes[name] = v end
  end
  return out
end

-- lower returns the per-lane minimum of a and b (a lane missing in either
-- is dropped: 0).
local function lower(a, b)
  local m = a
  if less(b, a) then m = b end
  local out = {h = m.h, l = m.l, t = m.t, lanes = {}}
  for name, v in pairs(a.lanes) do
    local o = b.lanes[name]
    if o then
      if less(o, v) then out.lanes[name] = o else out.lanes[name] = v end
    end
  end
  return out
end

-- raise merges pos into key, refreshes its TTL, and returns the parsed
-- position the key holds afterwards. An unparseable stored value is
-- overwritten.
local function raise(key, pos, ttl)
  local new = parse(pos)
  if not new then
    error("lsnstore: unparseable position argument " .. tostring(pos))
  end
  local old = parse(redis.call("GET", key))
  if not old then
    redis.call("SET", key, pos, "PX", ttl)
    return new
  end
  if covers(old, new) then
    redis.call("PEXPIRE", key, ttl)
    return old
  end
  local m = new
  if old.n > 0 or new.n > 0 then
    m = merge(old, new)
    pos = text(m)
  end
  redis.call("SET", key, pos, "PX", ttl)
  return m
end
`

// raiseScript raises the keys of KEYS to ARGV[1] with TTL ARGV[2] (ms),
// from the ARGV[4]-th key on (key positions) with TTL ARGV[3]. The last
// 2*ARGV[5] keys are pairs of a table's key signature and its unkeyed
// position, for the SignedKeyedTable names of the raise: the signature
// ARGV[5+j] of pair j is recorded (TTL ARGV[2]) when the table has none
// and its TTL refreshed when it is the table's; when the table's is
// another, the unkeyed position is raised too. It returns the number of
// pairs whose signature was another.
//
// A checked raise (SchemaChanges.RaiseChecked) passes three keys more,
// last: the schema generation, the marks of schema changes under way and
// the unknown-tables position; and, after the signatures (from a =
// 5+ARGV[5] on), ARGV[a+1] "1" when the raise checks the caller's graph,
// ARGV[a+2] the graph's generation, ARGV[a+3] "1" when the raise
// publishes a schema change counted against the graph, "2" when it
// publishes one the graph need not have (checked before it advances the
// generation), "0" otherwise, ARGV[a+4] an epoch for a store without a
// generation, and the marks the raise ends. It drops those marks and the
// lapsed ones, advances the generation for a schema change, and raises
// the unknown-tables position to ARGV[1] when a mark lives (flag 2) or
// the generation is not the graph's (flag 1); it returns {the pairs whose
// signature was another, the flags}.
var raiseScript = redis.NewScript(luaPrelude + luaAdvance + `
local m = tonumber(ARGV[5]) or 0
local g = 0
if #ARGV > 5 + m then g = 3 end
local n = #KEYS - 2 * m - g
local first = tonumber(ARGV[4]) or (n + 1)
for i = 1, n do
  local ttl = ARGV[2]
  if i >= first then ttl = ARGV[3] end
  raise(KEYS[i], ARGV[1], ttl)
end
local other = 0
for j = 1, m do
  local sig = ARGV[5 + j]
  local cur = redis.call("GET", KEYS[n + 2 * j - 1])
  if not cur or cur == sig then
    redis.call("SET", KEYS[n + 2 * j - 1], sig, "PX", ARGV[2])
  else
    raise(KEYS[n + 2 * j], ARGV[1], ARGV[2])
    other = other + 1
  end
end
if g == 0 then return other end
local a = 5 + m
local dk, pk, uk = KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS]
for i = a + 5, #ARGV do redis.call("ZREM", pk, ARGV[i]) end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", pk, "-inf", "(" .. now)
local flag = 0
if #redis.call("ZRANGE", pk, 0, 0) > 0 then flag = 2 end
if ARGV[a + 3] == "1" then advance(dk, ARGV[a + 4]) end
if ARGV[a + 1] == "1" and (redis.call("GET", dk) or "") ~= ARGV[a + 2] then flag = flag + 1 end
if ARGV[a + 3] == "2" then advance(dk, ARGV[a + 4]) end
if flag > 0 then raise(uk, ARGV[1], ARGV[2]) end
return {other, flag}
`)

// publishScript records replica replay positions.
//
//	KEYS[1]   the minimum key (<db>-replay_lsn)
//	KEYS[2]   the hash of the current replicas (name -> position)
//	KEYS[2+i] the key of replica i, i = 1..n
//	ARGV[1]   the TTL in milliseconds
//	ARGV[2*i], ARGV[2*i+1]  the name and new position of replica i
//
// Each replica key is raised; the hash is replaced by the raised positions
// of this call's replicas and the minimum key set to their per-lane
// minimum.
var publishScript = redis.NewScript(luaPrelude + `
local ttl = ARGV[1]
local minimum
redis.call("DEL", KEYS[2])
for i = 1, #KEYS - 2 do
  local pos = raise(KEYS[2 + i], ARGV[2 * i + 1], ttl)
  redis.call("HSET", KEYS[2], ARGV[2 * i], text(pos))
  if not minimum then minimum = pos else minimum = lower(minimum, pos) end
end
if minimum then
  redis.call("SET", KEYS[1], text(minimum), "PX", ttl)
  redis.call("PEXPIRE", KEYS[2], ttl)
end
return 0
`)
