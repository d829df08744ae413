-- Acquire, or report the holder, in one step. KEYS[1..6] (and [7], the box, for a waiter);
-- ARGV: key, owner, ttl_ms, fair (1 or 0), waiter id ('' for a plain attempt), alive_ms.
-- Returns {1, token, holds[, handoff_us]} when the key is ours ({..., handoff_us} when it was
-- handed to this waiter earlier), or {0, owner, token, holds, pttl_ms, now_us, held_ms} when
-- held (now_us only for a waiter; 0 otherwise; holds 0: the holder was evicted).
local key, owner, ttl, fair, id, alive_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5], tonumber(ARGV[6])
local L = lock_keys(key)
if id ~= '' then
  local token, holds, at = claim(L, KEYS[7], owner)
  if token then return {1, token, holds, at} end
end
local o, t, holds, at = read_lock(L.lock)
if o == owner and holds > 0 then
  -- A re-entry never shortens the lease: it ends at the later of its end and ttl from now.
  local pttl = math.max(redis.call('PTTL', L.lock), tonumber(ttl))
  redis.call('SET', L.lock, lock_value(t, holds + 1, at, o), 'PX', num(pttl))
  if id ~= '' then leave_queue(L, id) end
  return {1, t, holds + 1}
end
if not o then
  -- Free. Fair mode serves the queue first: the first live waiter gets the key, unless that
  -- is the caller. Otherwise whoever comes first takes it.
  local first = fair and first_live(L)
  if first and first ~= id then
    hand_off(L)
    o, t, holds, at = read_lock(L.lock)
  else
    local token = next_token(L)
    grant(L, owner, token, ttl)
    if id ~= '' then leave_queue(L, id) end
    return {1, num(token), 1}
  end
end
local now = 0
if id ~= '' then
  now = now_us()
  enqueue(L, id, owner, ttl, alive_ms, now)
end
return {0, o, t, holds, redis.call('PTTL', L.lock), num(now), held_ms(at)}
