-- The async queue's scripts (see redis.go for the keys). Each script is this library plus one call; ARGV[1] is
-- the key prefix in all of them. Times are Unix milliseconds. Scores are written with %.0f, since Lua's default
-- number format keeps only 14 significant digits.

local P = ARGV[1]

local function num(x) return string.format('%.0f', x) end

local function ended_hook(webhook)
  if webhook == nil or webhook == false or webhook == '' then return 'NO_WEBHOOK_PROVIDED' end
  return 'CANCELED'
end

-- ready_score is the score of a request in its queue: priority first, then enqueue time.
local function ready_score(h)
  local f = redis.call('HMGET', h, 'prio', 'created')
  return num(tonumber(f[1]) * 1e13 + tonumber(f[2]))
end

local function deadline(h)
  local f = redis.call('HMGET', h, 'created', 'mtq')
  return num(tonumber(f[1]) + tonumber(f[2]) * 1000)
end

-- requeue puts the request of hash h (status already QUEUED) back in its ready or delayed set.
local function requeue(id, h, queue, nb, now)
  if nb > now then
    redis.call('ZADD', P .. 'd:' .. queue, num(nb), id)
  else
    redis.call('ZADD', P .. 'q:' .. queue, ready_score(h), id)
  end
  redis.call('ZADD', P .. 'deadline', deadline(h), id)
end

-- promote moves the due requests of queue's delayed set to its ready set.
local function promote(queue, now)
  local d = P .. 'd:' .. queue
  local due = redis.call('ZRANGEBYSCORE', d, '-inf', num(now))
  for _, id in ipairs(due) do
    redis.call('ZREM', d, id)
    local h = P .. 'r:' .. id
    if redis.call('HGET', h, 'status') == 'QUEUED' then
      redis.call('ZADD', P .. 'q:' .. queue, ready_score(h), id)
    end
  end
end

-- settle_key uncounts a request that reached an end state from its key's pending requests.
local function settle_key(h)
  local key = redis.call('HGET', h, 'key')
  if key and key ~= '' and redis.call('HINCRBY', P .. 'keys', key, -1) <= 0 then
    redis.call('HDEL', P .. 'keys', key)
  end
end

-- ARGV: prefix, key, cap. Counts one more pending request of key: 1, or 0 when it has cap already.
local function admit_key()
  local key, cap = ARGV[2], tonumber(ARGV[3])
  local n = tonumber(redis.call('HGET', P .. 'keys', key) or '0')
  if cap > 0 and n >= cap then return 0 end
  redis.call('HINCRBY', P .. 'keys', key, 1)
  return 1
end

-- expire moves a QUEUED request to EXPIRED.
local function expire(id, h, queue, now)
  settle_key(h)
  redis.call('HSET', h, 'status', 'EXPIRED', 'status_at', num(now), 'whs', ended_hook(redis.call('HGET', h, 'webhook')))
  redis.call('ZREM', P .. 'q:' .. queue, id)
  redis.call('ZREM', P .. 'd:' .. queue, id)
  redis.call('ZREM', P .. 'deadline', id)
  redis.call('ZADD', P .. 'ended', num(now), id)
end

-- held checks that owner runs id: 1, 0 (lease lost) or -1 (no such request).
local function held(h, owner)
  local f = redis.call('HMGET', h, 'status', 'owner')
  if not f[1] then return -1 end
  if f[1] ~= 'IN_PROGRESS' or f[2] ~= owner then return 0 end
  return 1
end

local function unrun(id, queue)
  redis.call('ZREM', P .. 'run:' .. queue, id)
  redis.call('ZREM', P .. 'leased', id)
end

-- ARGV: prefix, queue, owner, now, lease end, max in progress, max scanned.
local function claim()
  local queue, owner, now, lease = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
  local maxrun, maxscan = tonumber(ARGV[6]), tonumber(ARGV[7])
  promote(queue, now)
  if maxrun > 0 and redis.call('ZCARD', P .. 'run:' .. queue) >= maxrun then return {'', 0} end
  local q = P .. 'q:' .. queue
  local expired = 0
  for _ = 1, maxscan do
    local top = redis.call('ZPOPMIN', q)
    if #top == 0 then break end
    local id = top[1]
    local h = P .. 'r:' .. id
    if redis.call('HGET', h, 'status') == 'QUEUED' then
      if tonumber(deadline(h)) <= now then
        expire(id, h, queue, now)
        expired = expired + 1
      else
        redis.call('HSET', h, 'status', 'IN_PROGRESS', 'status_at', num(now), 'owner', owner, 'lease', lease)
        redis.call('ZREM', P .. 'deadline', id)
        redis.call('ZADD', P .. 'run:' .. queue, lease, id)
        redis.call('ZADD', P .. 'leased', lease, id)
        return {id, expired, redis.call('HGETALL', h)}
      end
    end
  end
  return {'', expired}
end

-- ARGV: prefix, id, now. Returns 1 canceled, 0 not queued, -1 unknown.
local function cancel()
  local id, now = ARGV[2], tonumber(ARGV[3])
  local h = P .. 'r:' .. id
  local f = redis.call('HMGET', h, 'status', 'queue', 'webhook')
  if not f[1] then return -1 end
  if f[1] ~= 'QUEUED' then return 0 end
  settle_key(h)
  redis.call('HSET', h, 'status', 'CANCELED', 'status_at', num(now), 'whs', ended_hook(f[3]))
  redis.call('ZREM', P .. 'q:' .. f[2], id)
  redis.call('ZREM', P .. 'd:' .. f[2], id)
  redis.call('ZREM', P .. 'deadline', id)
  redis.call('ZADD', P .. 'ended', num(now), id)
  return 1
end

-- ARGV: prefix, id, owner, lease end.
local function heartbeat()
  local id, owner, lease = ARGV[2], ARGV[3], ARGV[4]
  local h = P .. 'r:' .. id
  local ok = held(h, owner)
  if ok ~= 1 then return ok end
  local queue = redis.call('HGET', h, 'queue')
  redis.call('HSET', h, 'lease', lease)
  redis.call('ZADD', P .. 'run:' .. queue, lease, id)
  redis.call('ZADD', P .. 'leased', lease, id)
  return 1
end

-- ARGV: prefix, id, owner, now, not before, attempts, errors JSON.
local function retry()
  local id, owner, now, nb = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  local h = P .. 'r:' .. id
  local ok = held(h, owner)
  if ok ~= 1 then return ok end
  local queue = redis.call('HGET', h, 'queue')
  unrun(id, queue)
  redis.call('HSET', h, 'status', 'QUEUED', 'status_at', num(now), 'owner', '', 'lease', '0', 'nb', num(nb),
    'attempts', ARGV[6], 'errors', ARGV[7])
  requeue(id, h, queue, nb, now)
  return 1
end

-- ARGV: prefix, id, owner, now, status, attempts, errors JSON, output.
local function finish()
  local id, owner, now = ARGV[2], ARGV[3], tonumber(ARGV[4])
  local h = P .. 'r:' .. id
  local ok = held(h, owner)
  if ok ~= 1 then return ok end
  local queue = redis.call('HGET', h, 'queue')
  unrun(id, queue)
  settle_key(h)
  redis.call('HSET', h, 'status', ARGV[5], 'status_at', num(now), 'owner', '', 'lease', '0', 'attempts', ARGV[6],
    'errors', ARGV[7])
  local webhook = redis.call('HGET', h, 'webhook')
  if webhook and webhook ~= '' then
    redis.call('HSET', h, 'whs', 'PENDING', 'output', ARGV[8], 'whn', num(now))
    redis.call('ZADD', P .. 'hooks', num(now), id)
  else
    redis.call('HSET', h, 'whs', 'NO_WEBHOOK_PROVIDED')
    redis.call('ZADD', P .. 'ended', num(now), id)
  end
  return 1
end

-- ARGV: prefix, now, hold end, n. Returns the ids taken.
local function hooks_due()
  local now, hold, n = ARGV[2], ARGV[3], tonumber(ARGV[4])
  local hooks = P .. 'hooks'
  local ids = redis.call('ZRANGEBYSCORE', hooks, '-inf', now, 'LIMIT', 0, n)
  for _, id in ipairs(ids) do
    redis.call('ZADD', hooks, hold, id)
    redis.call('HSET', P .. 'r:' .. id, 'whn', hold)
  end
  return ids
end

-- ARGV: prefix, id, now, result (0 delivered, 1 retry later, 2 give up), next.
local function hook_done()
  local id, now, res, nextAt = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
  local h = P .. 'r:' .. id
  if redis.call('HGET', h, 'whs') ~= 'PENDING' then return 0 end
  if res == 1 then
    redis.call('HINCRBY', h, 'wha', 1)
    redis.call('HSET', h, 'whn', nextAt)
    redis.call('ZADD', P .. 'hooks', nextAt, id)
    return 1
  end
  if res == 0 then
    redis.call('HSET', h, 'whs', 'SUCCEEDED', 'whn', '0')
  else
    redis.call('HSET', h, 'status', 'WEBHOOK_FAILED', 'status_at', now, 'whs', 'FAILED', 'whn', '0')
  end
  redis.call('HDEL', h, 'output')
  redis.call('ZREM', P .. 'hooks', id)
  redis.call('ZADD', P .. 'ended', now, id)
  return 1
end

-- ARGV: prefix, now, retention cutoff, n. Returns {requeued, expired, removed}.
local function sweep()
  local now, cutoff, n = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
  local requeued, expired, removed = 0, 0, 0
  local leased = redis.call('ZRANGEBYSCORE', P .. 'leased', '-inf', num(now), 'LIMIT', 0, n)
  for _, id in ipairs(leased) do
    local h = P .. 'r:' .. id
    local f = redis.call('HMGET', h, 'status', 'queue')
    redis.call('ZREM', P .. 'leased', id)
    if f[1] == 'IN_PROGRESS' then
      redis.call('ZREM', P .. 'run:' .. f[2], id)
      redis.call('HSET', h, 'status', 'QUEUED', 'status_at', num(now), 'owner', '', 'lease', '0')
      requeue(id, h, f[2], 0, now)
      requeued = requeued + 1
    end
  end
  local late = redis.call('ZRANGEBYSCORE', P .. 'deadline', '-inf', num(now), 'LIMIT', 0, n)
  for _, id in ipairs(late) do
    local h = P .. 'r:' .. id
    local f = redis.call('HMGET', h, 'status', 'queue')
    if f[1] == 'QUEUED' then
      expire(id, h, f[2], now)
      expired = expired + 1
    else
      redis.call('ZREM', P .. 'deadline', id)
    end
  end
  for _, queue in ipairs(redis.call('SMEMBERS', P .. 'queues')) do
    promote(queue, now)
  end
  local old = redis.call('ZRANGEBYSCORE', P .. 'ended', '-inf', cutoff, 'LIMIT', 0, n)
  for _, id in ipairs(old) do
    redis.call('DEL', P .. 'r:' .. id)
    redis.call('ZREM', P .. 'ended', id)
    removed = removed + 1
  end
  return {requeued, expired, removed}
end
