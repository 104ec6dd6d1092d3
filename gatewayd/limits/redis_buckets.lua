-- Shared by the batch script, which redis.go loads with this file prepended: the counter layout and its window
-- arithmetic, as in memory.go.
--
-- One string per (namespace, group, slug), its header, holds what a check reads of all ten counters of that
-- pair as little-endian 64-bit integers, so a batch reads every pair it touches with one MGET and writes each
-- with one call whatever its number of limits and calls, and no number goes through a decimal string. The header
-- is the UTC day d and its REQUEST and TOKEN counts, then per rolling counter (code 0..3: REQUEST/SECOND,
-- REQUEST/MINUTE, TOKEN/SECOND, TOKEN/MINUTE) its newest sub-slot, its total and the count of its newest
-- sub-slot, then the day's COST count, the UTC month m and its REQUEST, TOKEN and COST counts. The ring of the
-- S+1 sub-slot counts of rolling code c is the string "<header key>#c" (slugs, DNS labels and the layout never
-- contain '#'), read and written only when that window moves to a new sub-slot while it holds counts. Codes 4, 5
-- and 6 are the DAY counters (REQUEST, TOKEN, COST), 7, 8 and 9 the MONTH ones.
local S = 10
local byte, pack, unpack_ = string.byte, struct.pack, struct.unpack
-- The time of the call being run, which every call of a batch sets for itself (see setTime): the current
-- sub-slot index per rolling code, the UTC day and the UTC month.
local IDX, day, month = {}, 0, 0
-- Sub-slot width in microseconds per code, as slotWidth in memory.go.
local WIDTH = {[0] = 100000, 6000000, 100000, 6000000}
-- A rolling counter lives one window plus one sub-slot after it entered its newest sub-slot (it would count
-- zero afterwards), plus a second of margin; a DAY counter two days; a MONTH counter 33 days, past the end of
-- the longest month that its first charge can fall in. Milliseconds per code.
local TTL = {[0] = 2100, 67000, 2100, 67000, 172800000, 172800000, 172800000, 2851200000, 2851200000, 2851200000}
local HEAD = "<llllllllllllllllllll"
-- HEADLEN is the size of a header; one written before the COST and MONTH counters (120 bytes) reads as if they
-- were zero.
local HEADLEN = 160
-- CAL[c] is the header index of calendar code c's count, PERIOD[c] that of its period (v[1] the day, v[17] the
-- month), and FIRST[c] .. LAST[c] the counts that restart with that period.
local CAL = {[4] = 2, [5] = 3, [6] = 16, [7] = 18, [8] = 19, [9] = 20}
local PERIOD = {[4] = 1, [5] = 1, [6] = 1, [7] = 17, [8] = 17, [9] = 17}
local PERIODS = {[1] = {2, 3, 16}, [17] = {18, 19, 20}}
-- REQ[c] is true for the REQUEST codes, which a check charges one; COST[c] for the COST codes, which a settle
-- charges the cost instead of the tokens.
local REQ = {[0] = true, true, false, false, true, false, false, true, false, false}
local COST = {[6] = true, [9] = true}
local RING = "<lllllllllll"

-- setTime makes the call's time current: its SECOND and MINUTE sub-slot indexes, its UTC day and month.
local function setTime(sec, min, d, m)
  IDX[0], IDX[1], IDX[2], IDX[3], day, month = sec, min, sec, min, d, m
end

-- periodOf is the current period of calendar code c: the day or the month.
local function periodOf(c)
  if c >= 7 then
    return month
  end
  return day
end

-- readHead returns the 20 header values of a pair whose header is s (false when the key does not exist: all zero;
-- sub-slot indexes, days and months are never zero in practice). v[1] = d, v[2], v[3] = DAY REQUEST and TOKEN
-- counts, and for rolling code c: v[4 + 3c] = newest sub-slot, v[5 + 3c] = total, v[6 + 3c] = count of the newest
-- sub-slot; v[16] = DAY COST count, v[17] = m, v[18], v[19], v[20] = MONTH REQUEST, TOKEN and COST counts.
local function readHead(s)
  if not s then
    return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
  end
  if #s < HEADLEN then
    s = s .. string.rep("\0", HEADLEN - #s)
  end
  return {unpack_(HEAD, s)}
end

-- Scratch per rolling counter s (4 * key index + code), so the loop allocates no table per counter: TOT[s] is
-- its total advanced to the current time, MOVED[s] is true when its newest sub-slot changes, and RINGS[s] is its
-- advanced ring when advancing had to read it (nil when every sub-slot is zero).
local TOT, MOVED, RINGS = {}, {}, {}

-- ring reads the stored ring of code c of the pair key: all zero when absent. The slot of the newest sub-slot
-- is always stored as 0: its count is in the header.
local function ring(key, c)
  local s = redis.call("GET", key .. "#" .. c)
  if not s then
    return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
  end
  return {unpack_(RING, s)}
end

-- advance computes code c of the pair with header v advanced to the current sub-slot, without writing. In the
-- common case (same sub-slot, or an empty window) it only reads the header; a window holding counts that
-- moved reads its ring. A clock that goes back is treated as standing still, as in memory.go.
local function advance(key, v, c, s)
  local i, last, total = IDX[c], v[4 + 3 * c], v[5 + 3 * c]
  RINGS[s] = nil
  if i <= last then
    -- Same sub-slot (the admit loop inlines this case), or a clock gone back.
    TOT[s], MOVED[s] = total, false
    return
  end
  MOVED[s] = true
  if total == 0 or i - last > S then
    -- Every sub-slot is zero, or has left the window.
    TOT[s] = 0
    return
  end
  local n = ring(key, c)
  n[last % (S + 1) + 1] = v[6 + 3 * c]
  for k = last + 1, i do
    local j = k % (S + 1) + 1
    total = total - n[j]
    n[j] = 0
  end
  TOT[s], RINGS[s] = total, n
end

-- calCount is the count of calendar code c (4 to 9) of the pair with header v. A new UTC day or month starts at
-- zero; a clock that goes back keeps the newest period stored, as in memory.go.
local function calCount(v, c)
  if periodOf(c) > v[PERIOD[c]] then
    return 0
  end
  return v[CAL[c]]
end

-- charge adds x to code c of the pair with header v, as advance left it in s, writing the ring when the window
-- moved and had counts. It returns the TTL in milliseconds the pair needs, 0 when the one it has covers it.
local function charge(key, v, c, s, x)
  if c >= 4 then
    local p, i = PERIOD[c], CAL[c]
    local now = periodOf(c)
    if now > v[p] then
      -- First charge of the day or month: every count of that period restarts.
      v[p] = now
      for _, j in ipairs(PERIODS[p]) do
        v[j] = 0
      end
      v[i] = x
      return TTL[c]
    end
    v[i] = v[i] + x
    return 0
  end
  local b = 3 * c
  if not MOVED[s] then
    v[5 + b], v[6 + b] = v[5 + b] + x, v[6 + b] + x
    return 0
  end
  local n = RINGS[s]
  if n ~= nil then
    -- Counts remain in the window: store the ring, its newest slot at 0, for as long as they can count.
    redis.call("SET", key .. "#" .. c, pack(RING, n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8], n[9],
      n[10], n[11]), "PX", TTL[c])
  elseif v[5 + b] ~= 0 then
    -- Every count left the window: an absent ring is all zero.
    redis.call("DEL", key .. "#" .. c)
  end
  v[4 + b], v[5 + b], v[6 + b] = IDX[c], TOT[s] + x, x
  MOVED[s], RINGS[s] = false, nil
  return TTL[c]
end

-- commit writes the header of a pair and its TTL. A pair that existed keeps the longest TTL any of its
-- counters asked for (GT), so a SECOND charge never shortens the life of a MINUTE, DAY or MONTH counter in the
-- same header.
local function commit(key, v, exists, ttl)
  local h = pack(HEAD, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13],
    v[14], v[15], v[16], v[17], v[18], v[19], v[20])
  if not exists then
    redis.call("SET", key, h, "PX", ttl)
    return
  end
  if ttl > 0 then
    redis.call("PEXPIRE", key, ttl, "GT")
  end
  redis.call("SETRANGE", key, 0, h)
end

-- retryAfter is the time until enough of code c leaves the window for need more units, as window.retryAfter in
-- memory.go, for the window advance left in s.
local function retryAfter(key, v, c, s, need, now)
  local last, width = v[4 + 3 * c], WIDTH[c]
  local n = RINGS[s]
  if MOVED[s] then
    last = IDX[c]
    n = n or {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
  else
    n = ring(key, c)
    n[last % (S + 1) + 1] = v[6 + 3 * c]
  end
  local released = 0
  for i = last - S, last do
    released = released + n[i % (S + 1) + 1]
    if released >= need then
      return (i + S + 1) * width - now
    end
  end
  return (last + S + 1) * width - now
end
