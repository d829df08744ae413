-- KEYS[1] the lock. {owner, token, holds, pttl_ms}, or nil when free.
local o, t, holds = read_lock(KEYS[1])
if not o then return nil end
return {o, t, holds, redis.call('PTTL', KEYS[1])}
