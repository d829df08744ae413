-- The holders of one key (backend.hpp, "Shared holds"): one exclusive holder at dlock:{K}, or
-- shared ones in dlock:{K}:sh, never both live. A holder is a table: owner, token (text), holds
-- (0: evicted), at (acquired_ms, text), shared, and for a shared one expires (ms) and permits.

-- Whether this call keeps the readers' claim (dlock:{K}:rc), as redlock:// asks: a reader that
-- waits behind a writer cannot be starved by it taking the key back at once. redis:// needs
-- none: a release hands the key to the readers queued behind the writer (queue.lua).
local readers_claims = false

-- Whether this step's writer's grant ended a writer's claim that had refused a waiting reader
-- (its value '2', retry_ms): redlock:// then wakes every waiter of the key (its acquire.lua).
local readers_held_back = false

local function parse_shared(token, value)
  local expires, holds, at, permits, owner = string.match(value, '^(%d+) (%d+) (%d+) (%d+) (%S+)$')
  return {owner = owner, token = token, holds = tonumber(holds), at = at, shared = true,
          expires = tonumber(expires), permits = tonumber(permits)}
end

-- Writes a shared holder; the hash's own expiry never ends before its latest lease.
local function write_shared(L, h)
  redis.call('HSET', L.shared, h.token, num(h.expires) .. ' ' .. h.holds .. ' ' .. h.at .. ' ' .. h.permits .. ' ' .. h.owner)
  local left = h.expires - now_ms()
  if redis.call('PTTL', L.shared) < left then redis.call('PEXPIRE', L.shared, left) end
end

local function exclusive_of(L)
  local o, t, holds, at = read_lock(L.lock)
  if not o then return nil end
  return {owner = o, token = t, holds = holds, at = at, shared = false}
end

-- The live holders: the exclusive one (or nil) and the shared ones, whose ended leases are
-- dropped on the way.
local function holders_of(L)
  local x = exclusive_of(L)
  local s = {}
  if x then return x, s end
  local flat = redis.call('HGETALL', L.shared)
  for i = 1, #flat, 2 do
    local h = parse_shared(flat[i], flat[i + 1])
    if h.expires > now_ms() then
      s[#s + 1] = h
    else
      redis.call('HDEL', L.shared, flat[i])
    end
  end
  return x, s
end

-- The live holder (owner, token), evicted or not, or nil.
local function find(L, owner, token)
  local x = exclusive_of(L)
  if x then return (x.owner == owner and x.token == token) and x or nil end
  local value = redis.call('HGET', L.shared, token)
  if not value then return nil end
  local h = parse_shared(token, value)
  if h.owner ~= owner or h.expires <= now_ms() then return nil end
  return h
end

local function pttl(L, h)
  if h.shared then return h.expires - now_ms() end
  return redis.call('PTTL', L.lock)
end

-- Saves a holder's hold count, its lease unchanged.
local function save(L, h)
  if h.shared then
    write_shared(L, h)
  else
    redis.call('SET', L.lock, lock_value(h.token, h.holds, h.at, h.owner), 'KEEPTTL')
  end
end

-- Sets a holder's lease to end ttl ms from now, or with `never_shorten`, at the later of that
-- and its current end (a re-entry).
local function extend(L, h, ttl, never_shorten)
  if h.shared then
    local until_ms = now_ms() + tonumber(ttl)
    h.expires = never_shorten and math.max(h.expires, until_ms) or until_ms
    write_shared(L, h)
  elseif never_shorten then
    local left = math.max(redis.call('PTTL', L.lock), tonumber(ttl))
    redis.call('SET', L.lock, lock_value(h.token, h.holds, h.at, h.owner), 'PX', num(left))
  else
    redis.call('PEXPIRE', L.lock, ttl)
  end
end

local function remove(L, h)
  if h.shared then
    redis.call('HDEL', L.shared, h.token)
  else
    redis.call('DEL', L.lock)
  end
  if redis.call('EXISTS', L.lock, L.shared) == 0 then redis.call('ZREM', L.held, L.key) end
end

-- A new acquisition of (owner, ttl) in its mode; a writer's grant ends the writer's claim, a
-- reader's the readers' claim (no writer's grant comes while it stands).
local function grant(L, owner, ttl, shared, permits)
  local token = num(next_token(L))
  if shared then
    write_shared(L, {owner = owner, token = token, holds = 1, at = num(now_ms()), shared = true,
                     expires = now_ms() + tonumber(ttl), permits = permits})
    if readers_claims then redis.call('DEL', L.readers) end
  else
    redis.call('SET', L.lock, lock_value(token, 1, num(now_ms()), owner), 'PX', ttl)
    readers_held_back = redis.call('GET', L.claim) == '2'
    redis.call('DEL', L.claim)
  end
  redis.call('ZADD', L.held, 0, L.key)
  return token
end

-- Why a new acquisition in this mode is refused now, or nil: 'held' (an exclusive holder, or
-- any holder for a writer), 'readers' (a writer, by the readers' claim), 'mismatch' (the shared
-- holders' permits differ), 'claim' (a waiting writer's claim, which a reader `behind` the
-- writer that readers wait for passes) or 'full' (as many shared holders as permits).
local function refusal(L, x, s, shared, permits, behind)
  if x then return 'held' end
  if not shared then
    if #s > 0 then return 'held' end
    if readers_claims and redis.call('EXISTS', L.readers) == 1 then return 'readers' end
    return nil
  end
  if #s > 0 and s[1].permits ~= permits then return 'mismatch' end
  if not behind and redis.call('PTTL', L.claim) > 0 then return 'claim' end
  if permits > 0 and #s >= permits then return 'full' end
  return nil
end

-- The holders as rows of {owner, token, holds, pttl_ms, held_ms, shared (1 or 0)}, appended to
-- `out`, each after `prefix`'s values (list's key); `suffix` (list's waiters) after each.
local function rows(L, x, s, out, prefix, suffix)
  local all = x and {x} or s
  for _, h in ipairs(all) do
    for _, v in ipairs(prefix or {}) do out[#out + 1] = v end
    for _, v in ipairs({h.owner, h.token, h.holds, pttl(L, h), math.max(now_ms() - tonumber(h.at), 0),
                        h.shared and 1 or 0}) do
      out[#out + 1] = v
    end
    for _, v in ipairs(suffix or {}) do out[#out + 1] = v end
  end
  return out
end
