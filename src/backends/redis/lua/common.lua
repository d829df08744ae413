-- Prepended to every script at build time (cmake/embed_lua.cmake). Numbers are Lua doubles:
-- exact up to 2^53, far above any token (the server's clock in microseconds is about 2^51).
-- Renew and release without waiters read no clock; acquire reads it once, for acquired_ms.
--
-- The keys of one lock, all with the hash tag {K} (K the lock's key), in the order scripts
-- take them as KEYS:
--   [1] dlock:{K}         "token holds acquired_ms owner" while held (acquired_ms: the server's
--                         clock when this acquisition took the key); its PX expiry is the lease.
--                         holds 0: the holder was evicted (force-released with a lock delay) and
--                         the key stays closed until it releases or the lease runs out
--   [2] dlock:{K}:seq     the last token handed out; outlives the lease
--   [3] dlock:{K}:q       list of waiter ids, first come first
--   [4] dlock:{K}:qi      hash waiter id -> "alive_until_ms ttl_ms owner"
--   [5] dlock:held        sorted set of held keys (score 0, so ordered bytewise) for list
--   [6] dlock:keys        sorted set of keys with a :seq, for collect_idle
--   [7] dlock:{K}:w:ID    a waiter's box: the key handed to it, "token handoff_us"

local function num(x)
  return string.format('%.0f', x)
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function lock_keys(key)
  return {lock = KEYS[1], seq = KEYS[2], queue = KEYS[3], waiters = KEYS[4], held = KEYS[5], known = KEYS[6],
          key = key}
end

-- The holder of a lock key: owner, token (text), holds (0: evicted), acquired_ms (text); nil
-- when free.
local function read_lock(lock)
  local value = redis.call('GET', lock)
  if not value then return nil end
  local token, holds, at, owner = string.match(value, '^(%d+) (%d+) (%d+) (.+)$')
  return owner, token, tonumber(holds), at
end

local function lock_value(token, holds, at, owner)
  return token .. ' ' .. holds .. ' ' .. at .. ' ' .. owner
end

-- Milliseconds since acquired_ms, by the server's clock.
local function held_ms(at)
  return math.max(math.floor(now_us() / 1000) - tonumber(at), 0)
end

-- A new acquisition's token: one above the key's last. A key without a counter (new, or
-- collected, or lost in a restart without persistence) starts from the server's clock in
-- microseconds, which is above every token it had: the counter started from that clock too,
-- and every acquisition since took the server more than a microsecond.
local function next_token(L)
  local token = redis.call('INCR', L.seq)
  if token == 1 then
    token = now_us()
    redis.call('SET', L.seq, num(token))
    redis.call('ZADD', L.known, 0, L.key)
  end
  return token
end

local function grant(L, owner, token, ttl)
  redis.call('SET', L.lock, lock_value(num(token), 1, num(math.floor(now_us() / 1000)), owner), 'PX', ttl)
  redis.call('ZADD', L.held, 0, L.key)
end

-- The first waiter whose entry is still alive (refreshed within its window), dropping dead
-- ones (killed waiters) on the way; nil when none. Returns id, ttl, owner.
local function first_live(L)
  local now_ms
  while true do
    local id = redis.call('LINDEX', L.queue, 0)
    if not id then return nil end
    local entry = redis.call('HGET', L.waiters, id)
    if entry then
      local alive, ttl, owner = string.match(entry, '^(%d+) (%d+) (.+)$')
      now_ms = now_ms or math.floor(now_us() / 1000)
      if tonumber(alive) > now_ms then return id, ttl, owner end
    end
    redis.call('LPOP', L.queue)
    redis.call('HDEL', L.waiters, id)
  end
end

-- Hands the free key to the first live waiter: its owner, a new token, its TTL, one hold, and
-- "token handoff_us" in its box, where its BLPOP is waiting. Returns the owner, or nil.
local function hand_off(L)
  local id, ttl, owner = first_live(L)
  if not id then return nil end
  redis.call('LPOP', L.queue)
  redis.call('HDEL', L.waiters, id)
  local token = next_token(L)
  grant(L, owner, token, ttl)
  local box = L.lock .. ':w:' .. id
  redis.call('RPUSH', box, num(token) .. ' ' .. num(now_us()))
  -- An unclaimed handoff means nothing once its lease is over.
  redis.call('PEXPIRE', box, ttl)
  return owner
end

-- Adds the waiter at the back of the queue, or refreshes its entry where it stands.
local function enqueue(L, id, owner, ttl, alive_ms, now)
  local entry = num(math.floor(now / 1000) + alive_ms) .. ' ' .. ttl .. ' ' .. owner
  if redis.call('HSET', L.waiters, id, entry) == 1 then redis.call('RPUSH', L.queue, id) end
end

local function leave_queue(L, id)
  redis.call('LREM', L.queue, 1, id)
  redis.call('HDEL', L.waiters, id)
end

-- Frees the key and hands it to the first live waiter, as the last release does.
local function free(L)
  redis.call('DEL', L.lock)
  redis.call('ZREM', L.held, L.key)
  hand_off(L)
end

-- Evicts the key's holder, whoever it is, or only if its token is `token` ('' for any).
-- Delayed (a lock delay): the holder stays recorded with its token and lease, hold count 0, so
-- the key stays closed until that holder releases it or the lease runs out. Otherwise the key
-- is freed and handed on at once. Either way the key is published on `channel`, for holders to
-- learn at once (a store without the channel permission only loses the notice). Returns what
-- was held, {owner, token, holds, pttl_ms, held_ms}, or nil.
local function evict(L, delayed, channel, token)
  local o, t, holds, at = read_lock(L.lock)
  if not o or (token ~= '' and t ~= token) then return nil end
  local pttl = redis.call('PTTL', L.lock)
  if not delayed then
    free(L)
  elseif holds > 0 then
    redis.call('SET', L.lock, lock_value(t, 0, at, o), 'KEEPTTL')
  end
  redis.pcall('PUBLISH', channel, L.key)
  return {o, t, holds, pttl, held_ms(at)}
end

-- Drops one hold of (owner, token); the last one frees the key or hands it on. Returns the
-- holds left; -1 when that acquisition no longer holds the key; -2 when it was evicted with a
-- lock delay: its release acknowledges the loss, and the key is freed (and handed on).
local function drop_hold(L, owner, token)
  local o, t, holds, at = read_lock(L.lock)
  if o ~= owner or t ~= token then return -1 end
  if holds == 0 then
    free(L)
    return -2
  end
  if holds > 1 then
    redis.call('SET', L.lock, lock_value(t, holds - 1, at, o), 'KEEPTTL')
    return holds - 1
  end
  free(L)
  return 0
end

-- The key handed to the waiter of `box`, not claimed yet: its token, holds and handoff_us, or
-- nil. A handoff evicted meanwhile is acknowledged at once (the waiter never ran under it): the
-- key is freed and handed on, and nil is returned.
local function claim(L, box, owner)
  local token, at = string.match(redis.call('LPOP', box) or '', '^(%d+) (%d+)$')
  if not token then return nil end
  local o, t, holds = read_lock(L.lock)
  if o ~= owner or t ~= token then return nil end
  if holds == 0 then
    free(L)
    return nil
  end
  return token, holds, at
end
