-- The second round of a Redlock acquisition, on a server whose answer differed from the
-- majority's decision. KEYS[1] the lock, KEYS[2] its counter; ARGV: owner, token here, token,
-- holds. The acquisition (owner, token here) takes the decided token and hold count, and the
-- counter rises to that token, so every later acquisition here draws a higher one. Returns 1,
-- or 0 when (owner, token here) no longer holds the key here (gone, taken over, or evicted).
local o, t, holds, at = read_lock(KEYS[1])
if o ~= ARGV[1] or t ~= ARGV[2] or holds == 0 then return 0 end
redis.call('SET', KEYS[1], lock_value(ARGV[3], ARGV[4], at, o), 'KEEPTTL')
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[3]) then redis.call('SET', KEYS[2], ARGV[3]) end
return 1
