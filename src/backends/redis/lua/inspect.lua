-- KEYS[1] the lock. {owner, token, holds, pttl_ms}, or nil when free.
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'holds')
if not h[1] then return nil end
return {h[1], h[2], tonumber(h[3]), redis.call('PTTL', KEYS[1])}
