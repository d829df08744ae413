-- A waiter's heartbeat between two waits. KEYS[1..7]; ARGV: key, owner, ttl_ms, waiter id,
-- alive_ms. Returns {1, token, handoff_us} when the key was handed to it, {2} when the key is
-- free (the waiter makes an attempt), or {0, pttl_ms, now_us} with its entry refreshed (or
-- added again at the back, if it had been dropped as dead).
local key, owner, ttl, id, alive_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local L = lock_keys(key)
local token, _, at = claim(L, KEYS[7], owner)
if token then return {1, token, at} end
if not read_lock(L.lock) then return {2} end
local now = now_us()
enqueue(L, id, owner, ttl, alive_ms, now)
return {0, redis.call('PTTL', L.lock), num(now)}
