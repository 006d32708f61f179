package lsnstore

import "github.com/redis/go-redis/v9"

// luaPrelude holds the functions shared by the scripts. Positions are the
// canonical "X/Y" text; each half has at most eight hex digits, so
// tonumber(h, 16) is exact in a Lua number (a double).
const luaPrelude = `
local function parse(v)
  if not v then return nil end
  local h, l = string.match(v, "^(%x+)/(%x+)$")
  if not h or #h > 8 or #l > 8 then return nil end
  return tonumber(h, 16), tonumber(l, 16)
end

-- raise sets key to pos unless it holds a larger position, refreshes its
-- TTL, and returns the position it holds afterwards. An unparseable stored
-- value is overwritten.
local function raise(key, pos, ttl)
  local nh, nl = parse(pos)
  if not nh then
    error("lsnstore: unparseable position argument " .. tostring(pos))
  end
  local old = redis.call("GET", key)
  local oh, ol = parse(old)
  if not oh or nh > oh or (nh == oh and nl > ol) then
    redis.call("SET", key, pos, "PX", ttl)
    return pos
  end
  redis.call("PEXPIRE", key, ttl)
  return old
end
`

// raiseScript raises every key of KEYS to ARGV[1] with TTL ARGV[2] (ms).
var raiseScript = redis.NewScript(luaPrelude + `
for i = 1, #KEYS do
  raise(KEYS[i], ARGV[1], ARGV[2])
end
return 0
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
// of this call's replicas and the minimum key set to their minimum.
var publishScript = redis.NewScript(luaPrelude + `
local ttl = ARGV[1]
local minh, minl, mins
redis.call("DEL", KEYS[2])
for i = 1, #KEYS - 2 do
  local pos = raise(KEYS[2 + i], ARGV[2 * i + 1], ttl)
  redis.call("HSET", KEYS[2], ARGV[2 * i], pos)
  local h, l = parse(pos)
  if not mins or h < minh or (h == minh and l < minl) then
    minh, minl, mins = h, l, pos
  end
end
if mins then
  redis.call("SET", KEYS[1], mins, "PX", ttl)
  redis.call("PEXPIRE", KEYS[2], ttl)
end
return 0
`)
