-- KEYS[1..6]; ARGV: key. Frees the key whoever holds it and hands it to the first live waiter.
-- Returns what was held, {owner, token, holds, pttl_ms, held_ms}, or nil.
return evict(lock_keys(ARGV[1]))
