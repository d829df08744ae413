-- A waiter's heartbeat between two waits. KEYS[1..7]; ARGV: key, owner, ttl_ms, waiter id,
-- alive_ms, shared (1 or 0), permits, claim_ms. Returns {1, token, handoff_us} when the key was
-- handed to it, {2} when it may take the key now (the waiter makes an attempt), or {0, retry_ms,
-- now_us} with its entry refreshed (or added again at the back, if it had been dropped as dead)
-- and a waiting writer's claim renewed.
local key, owner, ttl, id, alive_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local shared, permits = ARGV[6] == '1', tonumber(ARGV[7])
local L = lock_keys(key)
local token, _, at = claim(L, KEYS[7], owner)
if token then return {1, token, at} end
local x, s = holders_of(L)
local why = refusal(L, x, s, shared, permits)
if not why or why == 'mismatch' then return {2} end
local retry = retry_ms(L, x, s, why, shared, true, ARGV[8])
enqueue(L, id, owner, ttl, alive_ms, shared, permits)
return {0, retry, num(now_us())}
