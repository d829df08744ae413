-- KEYS[1..8]; ARGV: key, alive_ms. Frees the key whoever holds it and rings the bell. Returns
-- what was held, {owner, token, holds, pttl_ms, held_ms}, or nil.
local held = evict(lock_keys(ARGV[1]))
if held then ring(KEYS[7], KEYS[8], ARGV[2]) end
return held
