-- KEYS[1..6]; ARGV: key, owner, token. The holds left (the last one frees the key or hands it
-- to the first live waiter), or -1 when (owner, token) no longer holds it.
return drop_hold(lock_keys(ARGV[1]), ARGV[2], ARGV[3])
