-- Admit: check every limit of a plan, then charge one to every REQUEST counter, or nothing. See redis.go.
-- KEYS: one string per (namespace, group, slug) of the plan. ARGV[4 + k]: the codes of the limits on KEYS[k],
-- one digit each ("0".."5"; code + 6 for a repeat of a counter an earlier limit already charges); then the
-- plan index of each of those limits in the same order, two bytes each; then their thresholds packed as
-- little-endian 64-bit integers, and that packing's struct format. It returns {-1} when admitted, or {plan
-- index of the first refusing limit in plan order, retry after in microseconds}.
local now = tonumber(ARGV[4])
local K = #KEYS
local hit, retry = -1, 0
local ranks, T = ARGV[5 + K], {unpack_(ARGV[7 + K], ARGV[6 + K])}
local at = 0
-- Every header is read with one MGET; it is all a check needs unless a window moved.
local STR, V = redis.call("MGET", unpack(KEYS)), {}
for k = 1, K do
  local key, codes = KEYS[k], ARGV[4 + k]
  local v = readHead(STR[k])
  V[k] = v
  for p = 1, #codes do
    local c = (byte(codes, p) - 48) % 6
    at = at + 1
    local thr, cur = T[at]
    if c >= 4 then
      cur = dayCount(v, c)
    elseif IDX[c] <= v[4 + 3 * c] then
      -- Same sub-slot as the last charge (or a clock gone back): the stored total is the count.
      cur = v[5 + 3 * c]
    else
      advance(key, v, c, 4 * k + c)
      cur = TOT[4 * k + c]
    end
    -- REQUEST needs room for this call; TOKEN only refuses once exhausted, since the cost is not known yet.
    local req = c == 0 or c == 1 or c == 4
    if (req and cur + 1 > thr) or (not req and cur >= thr) then
      -- The 429 names the first refusing limit in plan order, which need not be the first found here.
      local q = 2 * at
      local rank = byte(ranks, q - 1) * 256 + byte(ranks, q)
      if hit < 0 or rank < hit then
        hit = rank
        if c >= 4 then
          retry = (day + 1) * 86400000000 - now
        else
          retry = retryAfter(key, v, c, 4 * k + c, cur + 1 - thr, now)
        end
      end
    end
  end
end
if hit >= 0 then
  return {hit, retry}
end
for k = 1, K do
  local key, codes, v = KEYS[k], ARGV[4 + k], V[k]
  local ttl, dirty = 0, false
  for p = 1, #codes do
    local c = byte(codes, p) - 48
    if c <= 1 and not MOVED[4 * k + c] then
      -- The common case inline: one more in the current sub-slot.
      local b = 3 * c
      v[5 + b], v[6 + b] = v[5 + b] + 1, v[6 + b] + 1
      dirty = true
    elseif c <= 1 or c == 4 then
      local t = charge(key, v, c, 4 * k + c, 1)
      if t > ttl then ttl = t end
      dirty = true
    end
  end
  if dirty then
    commit(key, v, STR[k], ttl)
  end
end
return {-1}
