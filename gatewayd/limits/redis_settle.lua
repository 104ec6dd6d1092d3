-- Settle: add ARGV[4] tokens to every TOKEN bucket of a plan. See redis.go.
local tokens = tonumber(ARGV[4])
for k = 1, #KEYS do
  local b = 4 + (k - 1) * 4
  if ARGV[b + 1] == "1" and ARGV[b + 4] == "1" then
    local unit = tonumber(ARGV[b + 2])
    if unit == 2 then
      addDay(KEYS[k], tokens)
    else
      add(KEYS[k], load(KEYS[k], idx[unit]), unit, tokens)
    end
  end
end
return 0
