-- Count: the current count of one bucket, ARGV[4] its unit. See redis.go.
local unit = tonumber(ARGV[4])
if unit == 2 then
  return tonumber(redis.call("GET", KEYS[1] .. ":" .. day)) or 0
end
return load(KEYS[1], idx[unit]).total
