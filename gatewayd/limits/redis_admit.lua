-- Admit: check every limit of a plan, then charge one to every REQUEST bucket, or nothing. See redis.go.
local DAY = 86400000000
local now = tonumber(ARGV[4])
local state = {}
for k = 1, #KEYS do
  local b = 4 + (k - 1) * 4
  local typ, unit, thr = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local cur, w
  if unit == 2 then
    cur = tonumber(redis.call("GET", KEYS[k] .. ":" .. day)) or 0
  else
    w = state[KEYS[k]] or load(KEYS[k], idx[unit])
    state[KEYS[k]] = w
    cur = w.total
  end
  -- REQUEST needs room for this call; TOKEN only refuses once exhausted, since the cost is not known yet.
  if (typ == 0 and cur + 1 > thr) or (typ == 1 and cur >= thr) then
    if unit == 2 then
      return {k - 1, (day + 1) * DAY - now}
    end
    -- Time until enough units leave the window, as window.retryAfter in memory.go.
    local need, released, width = cur + 1 - thr, 0, WIDTH[unit]
    local n = w.n or ring(KEYS[k])
    for i = w.last - S, w.last do
      released = released + n[i % (S + 1)]
      if released >= need then
        return {k - 1, (i + S + 1) * width - now}
      end
    end
    return {k - 1, (w.last + S + 1) * width - now}
  end
end
for k = 1, #KEYS do
  local b = 4 + (k - 1) * 4
  if ARGV[b + 1] == "0" and ARGV[b + 4] == "1" then
    local unit = tonumber(ARGV[b + 2])
    if unit == 2 then
      addDay(KEYS[k], 1)
    else
      add(KEYS[k], state[KEYS[k]], unit, 1)
    end
  end
end
return {-1}
