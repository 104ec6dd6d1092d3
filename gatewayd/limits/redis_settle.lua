-- Settle: add ARGV[4] tokens to every TOKEN counter of a plan. See redis.go. KEYS: one string per (namespace,
-- group, slug) of the plan with a TOKEN limit; ARGV[4 + k]: the TOKEN codes (2, 3 or 5) on KEYS[k], each once.
local tokens = tonumber(ARGV[4])
local STR = redis.call("MGET", unpack(KEYS))
for k = 1, #KEYS do
  local key, codes, str = KEYS[k], ARGV[4 + k], STR[k]
  local v = readHead(str)
  local ttl = 0
  for p = 1, #codes do
    local c = byte(codes, p) - 48
    if c < 4 then
      advance(key, v, c, c)
    end
    local t = charge(key, v, c, c, tokens)
    if t > ttl then ttl = t end
  end
  commit(key, v, str, ttl)
end
return 0
