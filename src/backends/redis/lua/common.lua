-- Prepended to every script at build time (cmake/embed_lua.cmake), before holders.lua. Numbers
-- are Lua doubles: exact up to 2^53, far above any token (the server's clock in microseconds is
-- about 2^51).
--
-- The keys of one lock, all with the hash tag {K} (K the lock's key), in the order scripts
-- take them as KEYS:
--   [1] dlock:{K}         the exclusive holder, "token holds acquired_ms owner" (acquired_ms: the
--                         server's clock when this acquisition took the key); its PX expiry is
--                         the lease. holds 0: the holder was evicted (force-released with a lock
--                         delay) and the key stays closed until it releases or the lease runs out
--   [2] dlock:{K}:seq     the last token handed out, in every mode; outlives the leases
--   [3] dlock:{K}:q       list of waiter ids, first come first
--   [4] dlock:{K}:qi      hash waiter id -> "alive_until_ms ttl_ms owner", plus " permits" for a
--                         shared waiter
--   [5] dlock:held        sorted set of held keys (score 0, so ordered bytewise) for list
--   [6] dlock:keys        sorted set of keys with a :seq, for collect_idle
--   [7] dlock:{K}:w:ID    a waiter's box: the key handed to it, "token handoff_us"
-- and, named from [1] (scripts of one key only):
--   dlock:{K}:sh          hash of the shared holders: token -> "expires_ms holds acquired_ms
--                         permits owner"; its PX covers the latest expires_ms
--   dlock:{K}:wc          the writer's claim (backend.hpp): refuses new shared holders while it
--                         lives (PX kWriterClaim); '1', or '2' once it refused a waiting reader
--   dlock:{K}:rc          the readers' claim (backend.hpp; redlock:// only), the token of the
--                         writer it was placed on: refuses new writers while it lives (PX
--                         kWriterClaim) and no grant has followed

local function num(x)
  return string.format('%.0f', x)
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The server's clock in ms, read once per script: every lease of one step is judged alike.
local clock_ms
local function now_ms()
  clock_ms = clock_ms or math.floor(now_us() / 1000)
  return clock_ms
end

local function named(lock)
  return {lock = lock, shared = lock .. ':sh', claim = lock .. ':wc', readers = lock .. ':rc'}
end

-- Every key of the lock at `lock`, and the store's indexes.
local function keys_of(lock, key, held, known)
  local L = named(lock)
  L.seq, L.queue, L.waiters, L.held, L.known, L.key = lock .. ':seq', lock .. ':q', lock .. ':qi', held, known, key
  return L
end

local function lock_keys(key)
  return keys_of(KEYS[1], key, KEYS[5], KEYS[6])
end

-- The exclusive holder of a lock key: owner, token (text), holds (0: evicted), acquired_ms
-- (text); nil when there is none.
local function read_lock(lock)
  local value = redis.call('GET', lock)
  if not value then return nil end
  local token, holds, at, owner = string.match(value, '^(%d+) (%d+) (%d+) (.+)$')
  return owner, token, tonumber(holds), at
end

local function lock_value(token, holds, at, owner)
  return token .. ' ' .. holds .. ' ' .. at .. ' ' .. owner
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

-- The locks of a set script (acquire_set.lua, release_set.lua): KEYS[1] and KEYS[2] are the
-- indexes (dlock:held, dlock:keys), then `stride` keys per lock, its dlock:{K} first; ARGV from
-- `from` on holds `per` values per lock, its key first. Returns the i-th lock's keys, and the
-- positions of its first KEYS and ARGV entries.
local function set_count(stride)
  return (#KEYS - 2) / stride
end

local function set_lock(i, stride, from, per)
  local k, a = 3 + (i - 1) * stride, from + (i - 1) * per
  -- keys_of()'s, in one constructor and without making the names KEYS already holds (a set's
  -- cost is per key).
  local lock = KEYS[k]
  return {lock = lock, shared = lock .. ':sh', claim = lock .. ':wc', readers = lock .. ':rc', seq = KEYS[k + 1],
          queue = KEYS[k + 2], waiters = KEYS[k + 3], held = KEYS[1], known = KEYS[2], key = ARGV[a]}, k, a
end
