-- KEYS[1] the lock; ARGV: owner, token, ttl_ms. 1 when the lease was (owner, token)'s and now
-- ends ttl_ms from now, 0 when it is no longer theirs (gone, taken over, or evicted).
local o, t, holds = read_lock(KEYS[1])
if o ~= ARGV[1] or t ~= ARGV[2] or holds == 0 then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
