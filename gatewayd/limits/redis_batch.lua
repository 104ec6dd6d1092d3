-- Batch: run the calls of one pipeline in queue order, atomically, and return two integers per call. See redis.go.
-- KEYS: every pair key the calls use, each once. ARGV, per call: its kind ("a" check, "s" settle, "c" count); its
-- time, packed as six little-endian 64-bit integers (SECOND and MINUTE sub-slot indexes, UTC day, UTC month, then
-- for a check the time in microseconds and the first instant of the next month in microseconds, for a settle the
-- tokens and the cost in micro-USD); its keys, as 1-based KEYS indexes of two bytes each; then one string per
-- key, the codes of its limits, one byte each ('0' + code, code 0..9; a check marks with code + 10 a repeat of a
-- counter an earlier limit already charges, a settle lists its TOKEN and COST codes, a count the one code it
-- reads). A check then has the plan index of each of its limits, two bytes each, their thresholds
-- packed as little-endian 64-bit integers, and that packing's struct format.
--
-- A check answers {-1, 0} when admitted, or {plan index of the first refusing limit in plan order, retry after
-- in microseconds}; a settle {0, 0}; a count {count, 0}. Headers are read once, with one MGET, kept decoded while
-- the calls run and written once at the end; rings are read and written as the calls need them.
local STR = redis.call("MGET", unpack(KEYS))
-- V[g] is the decoded header of KEYS[g] once a call used it; TTLS[g] the longest TTL a charge asked of it, and
-- CHARGED[g] whether a call changed it.
local V, TTLS, CHARGED = {}, {}, {}
-- THRESHOLDS caches decoded thresholds by their packed string: the checks of one plan share it.
local THRESHOLDS = {}

local function head(g)
  local v = V[g]
  if not v then
    v = readHead(STR[g])
    V[g] = v
  end
  return v
end

local function charged(g, ttl)
  CHARGED[g] = true
  TTLS[g] = math.max(TTLS[g] or 0, ttl)
end

-- ref is the KEYS index of the k-th key of a call.
local function ref(refs, k)
  return byte(refs, 2 * k - 1) * 256 + byte(refs, 2 * k)
end

-- check checks every limit of a plan, then charges one to every REQUEST counter, or nothing. Its n keys' codes
-- are ARGV[a .. a + n - 1], then come the ranks, the thresholds and their format.
local function check(refs, n, a, now, nextMonth)
  local ranks, packed = ARGV[a + n], ARGV[a + n + 1]
  local T = THRESHOLDS[packed]
  if not T then
    T = {unpack_(ARGV[a + n + 2], packed)}
    THRESHOLDS[packed] = T
  end
  local hit, retry, at = -1, 0, 0
  for k = 1, n do
    local g = ref(refs, k)
    local key, codes, v = KEYS[g], ARGV[a + k - 1], head(g)
    for p = 1, #codes do
      local c = (byte(codes, p) - 48) % 10
      local s = 4 * g + c
      at = at + 1
      local thr, cur = T[at]
      if c >= 4 then
        cur = calCount(v, c)
      elseif IDX[c] <= v[4 + 3 * c] then
        -- Same sub-slot as the last charge (or a clock gone back): the stored total is the count.
        cur, MOVED[s] = v[5 + 3 * c], false
      else
        advance(key, v, c, s)
        cur = TOT[s]
      end
      -- REQUEST needs room for this call; TOKEN and COST only refuse once exhausted, since what the call uses
      -- is not known yet.
      local req = REQ[c]
      if (req and cur + 1 > thr) or (not req and cur >= thr) then
        -- The 429 names the first refusing limit in plan order, which need not be the first found here.
        local q = 2 * at
        local rank = byte(ranks, q - 1) * 256 + byte(ranks, q)
        if hit < 0 or rank < hit then
          hit = rank
          if c >= 7 then
            retry = nextMonth - now
          elseif c >= 4 then
            retry = (day + 1) * 86400000000 - now
          else
            retry = retryAfter(key, v, c, s, cur + 1 - thr, now)
          end
        end
      end
    end
  end
  if hit >= 0 then
    return hit, retry
  end
  for k = 1, n do
    local g = ref(refs, k)
    local key, codes, v = KEYS[g], ARGV[a + k - 1], V[g]
    local ttl, dirty = 0, false
    for p = 1, #codes do
      local c = byte(codes, p) - 48
      local s = 4 * g + c
      if c <= 1 and not MOVED[s] then
        -- The common case inline: one more in the current sub-slot.
        local b = 3 * c
        v[5 + b], v[6 + b] = v[5 + b] + 1, v[6 + b] + 1
        dirty = true
      elseif c < 10 and REQ[c] then
        local t = charge(key, v, c, s, 1)
        if t > ttl then ttl = t end
        dirty = true
      end
    end
    if dirty then
      charged(g, ttl)
    end
  end
  return -1, 0
end

-- settle adds tokens to the TOKEN counters and cost to the COST counters listed in ARGV[a .. a + n - 1] for its
-- n keys.
local function settle(refs, n, a, tokens, cost)
  for k = 1, n do
    local g = ref(refs, k)
    local key, codes, v = KEYS[g], ARGV[a + k - 1], head(g)
    local ttl = 0
    for p = 1, #codes do
      local c = byte(codes, p) - 48
      local s = 4 * g + c
      if c < 4 then
        advance(key, v, c, s)
      end
      local x = tokens
      if COST[c] then
        x = cost
      end
      local t = charge(key, v, c, s, x)
      if t > ttl then ttl = t end
    end
    charged(g, ttl)
  end
end

-- count is the current count of the code in ARGV[a] of its one key.
local function count(refs, a)
  local g = ref(refs, 1)
  local c, v = byte(ARGV[a], 1) - 48, head(g)
  if c >= 4 then
    return calCount(v, c)
  end
  local s = 4 * g + c
  advance(KEYS[g], v, c, s)
  return TOT[s]
end

local out, a, m = {}, 1, 0
while a <= #ARGV do
  local kind, refs = ARGV[a], ARGV[a + 2]
  local sec, min, d, mo, x, y = unpack_("<llllll", ARGV[a + 1])
  setTime(sec, min, d, mo)
  local n = #refs / 2
  local r1, r2 = 0, 0
  if kind == "a" then
    r1, r2 = check(refs, n, a + 3, x, y)
    a = a + 3 + n + 3
  elseif kind == "s" then
    settle(refs, n, a + 3, x, y)
    a = a + 3 + n
  else
    r1 = count(refs, a + 3)
    a = a + 4
  end
  out[m + 1], out[m + 2], m = r1, r2, m + 2
end
for g = 1, #KEYS do
  if CHARGED[g] then
    commit(KEYS[g], V[g], STR[g], TTLS[g])
  end
end
return out
