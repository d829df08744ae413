-- KEYS[1] the lock, KEYS[2] its queue. {owner, token, holds (0: evicted), pttl_ms, held_ms,
-- waiters}, or nil when free.
local o, t, holds, at = read_lock(KEYS[1])
if not o then return nil end
return {o, t, holds, redis.call('PTTL', KEYS[1]), held_ms(at), redis.call('LLEN', KEYS[2])}
