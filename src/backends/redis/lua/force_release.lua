-- KEYS[1..6]; ARGV: key, delayed ('1': a lock delay; '0': free the key and hand it on at once),
-- the notice channel, the holder's token ('' for any holder). Returns what was held, {owner,
-- token, holds, pttl_ms, held_ms}, or nil.
return evict(lock_keys(ARGV[1]), ARGV[2] == '1', ARGV[3], ARGV[4])
