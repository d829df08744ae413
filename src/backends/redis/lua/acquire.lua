-- Acquire, or report the holder, in one step. KEYS[1..6] (and [7], the box, for a waiter);
-- ARGV: key, owner, ttl_ms, fair (1 or 0), waiter id ('' for a plain attempt), alive_ms.
-- Returns {1, token, holds[, handoff_us]} when the key is ours ({..., handoff_us} when it was
-- handed to this waiter earlier), or {0, owner, token, holds, pttl_ms, now_us} when held.
local key, owner, ttl, fair, id, alive_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5], tonumber(ARGV[6])
local L = lock_keys(key)
local now = now_us()
local h = redis.call('HMGET', L.lock, 'owner', 'token', 'holds')
if id ~= '' then
  local handed = redis.call('LPOP', KEYS[7])
  local token, at = string.match(handed or '', '^(%d+) (%d+)$')
  if token and h[1] == owner and h[2] == token then return {1, token, 1, at} end
end
if h[1] == owner then
  local holds = redis.call('HINCRBY', L.lock, 'holds', 1)
  redis.call('PEXPIRE', L.lock, ttl)
  if id ~= '' then leave_queue(L, id) end
  return {1, h[2], holds}
end
if not h[1] then
  -- Free. Fair mode serves the queue first: the first live waiter gets the key, unless that
  -- is the caller. Otherwise whoever comes first takes it.
  local first = fair and first_live(L, now)
  if first and first ~= id then
    hand_off(L, now)
    h = redis.call('HMGET', L.lock, 'owner', 'token', 'holds')
  else
    local token = next_token(L, now)
    grant(L, owner, token, ttl)
    if id ~= '' then leave_queue(L, id) end
    return {1, num(token), 1}
  end
end
if id ~= '' then enqueue(L, id, owner, ttl, alive_ms, now) end
return {0, h[1], h[2], tonumber(h[3]), redis.call('PTTL', L.lock), num(now)}
