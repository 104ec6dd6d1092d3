-- Count: the current count of code ARGV[5] of the pair KEYS[1]. See redis.go.
local c = tonumber(ARGV[5])
local v = readHead(redis.call("GET", KEYS[1]))
if c >= 4 then
  return dayCount(v, c)
end
advance(KEYS[1], v, c, c)
return TOT[c]
