-- Shared by the admit, settle and count scripts, which redis.go loads with this file prepended: the bucket
-- layout and its window arithmetic, as in memory.go. ARGV[1..3] are secIdx, minIdx and the UTC day.
local S = 10
-- Sub-slot width in microseconds per rolling unit (SECOND = 0, MINUTE = 1), as slotWidth in memory.go.
local WIDTH = {[0] = 100000, [1] = 6000000}
local DAY_TTL = 172800
local idx = {[0] = tonumber(ARGV[1]), [1] = tonumber(ARGV[2])}
local day = tonumber(ARGV[3])
local FIELDS = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"}

-- ring reads the S+1 slot counters of a rolling bucket.
local function ring(key)
  local v = redis.call("HMGET", key, unpack(FIELDS))
  local n = {}
  for j = 0, S do n[j] = tonumber(v[j + 1]) or 0 end
  return n
end

-- load reads a rolling bucket advanced to slot i, without writing it. The common case, a bucket already in
-- slot i, reads two fields; only a bucket that must drop old slots reads its ring. A clock that goes back is
-- treated as standing still, as in memory.go.
local function load(key, i)
  local v = redis.call("HMGET", key, "l", "t")
  local last = tonumber(v[1])
  if last == nil then
    return {last = i, total = 0, fresh = true}
  end
  local w = {last = last, total = tonumber(v[2]) or 0}
  if i <= last then
    return w
  end
  w.n, w.dirty, w.fresh = ring(key), {}, true
  if i - last > S then
    for j = 0, S do
      if w.n[j] ~= 0 then w.n[j] = 0; w.dirty[#w.dirty + 1] = j end
    end
    w.total = 0
  else
    for k = last + 1, i do
      local j = k % (S + 1)
      if w.n[j] ~= 0 then
        w.total = w.total - w.n[j]
        w.n[j] = 0
        w.dirty[#w.dirty + 1] = j
      end
    end
  end
  w.last = i
  return w
end

-- add charges v to the newest slot of w. A bucket that moved to a new slot (or is new) writes its dropped
-- slots and refreshes its TTL: one window plus one slot (after which every slot charged now has left the
-- window) and a second of margin. Within the same slot the TTL set on entering it still covers the charge.
local function add(key, w, unit, v)
  local j = w.last % (S + 1)
  w.total = w.total + v
  if not w.fresh then
    redis.call("HINCRBY", key, j, v)
    redis.call("HSET", key, "t", w.total)
    return
  end
  local nj = v
  if w.n then
    w.n[j] = w.n[j] + v
    nj = w.n[j]
  end
  local args = {"l", w.last, "t", w.total, j, nj}
  for _, d in ipairs(w.dirty or {}) do
    if d ~= j then
      args[#args + 1] = d
      args[#args + 1] = 0
    end
  end
  redis.call("HSET", key, unpack(args))
  redis.call("PEXPIRE", key, (S + 1) * WIDTH[unit] / 1000 + 1000)
end

-- addDay charges a DAY bucket; the TTL is set once, when the charge creates the key.
local function addDay(key, v)
  local k = key .. ":" .. day
  if redis.call("INCRBY", k, v) == v then
    redis.call("EXPIRE", k, DAY_TTL)
  end
end
