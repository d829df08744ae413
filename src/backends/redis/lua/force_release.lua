-- KEYS[1..6]; ARGV: key. Frees the key whoever holds it and hands it to the first live waiter.
-- Returns what was held, {owner, token, holds, pttl_ms, held_ms}, or nil.
local L = lock_keys(ARGV[1])
local o, t, holds, at = read_lock(L.lock)
if not o then return nil end
local pttl = redis.call('PTTL', L.lock)
redis.call('DEL', L.lock)
redis.call('ZREM', L.held, L.key)
hand_off(L)
return {o, t, holds, pttl, held_ms(at)}
