-- KEYS[1] the lock; ARGV: owner, token, ttl_ms. 1 when the lease was (owner, token)'s and now
-- ends ttl_ms from now, 0 when it is no longer theirs.
local h = redis.call('HMGET', KEYS[1], 'owner', 'token')
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
