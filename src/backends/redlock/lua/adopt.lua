-- The second round of a Redlock acquisition, on a server whose answer differed from the
-- majority's decision. KEYS[1] the lock, KEYS[2] its counter; ARGV: owner, token here, token,
-- holds. The acquisition (owner, token here) takes the decided token and hold count, and the
-- counter rises to that token, so every later acquisition here draws a higher one. Returns 1,
-- or 0 when (owner, token here) no longer holds the key here (gone, taken over, or evicted), or
-- when another shared holder here drew the decided token (a concurrent reader: both retry).
local L = named(KEYS[1])
local h = find(L, ARGV[1], ARGV[2])
if not h or h.holds == 0 then return 0 end
if h.shared and h.token ~= ARGV[3] then
  if redis.call('HEXISTS', L.shared, ARGV[3]) == 1 then return 0 end
  redis.call('HDEL', L.shared, h.token)
end
h.token, h.holds = ARGV[3], tonumber(ARGV[4])
save(L, h)
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[3]) then redis.call('SET', KEYS[2], ARGV[3]) end
return 1
