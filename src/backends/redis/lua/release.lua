-- KEYS[1..6]; ARGV: key, owner, token. The holds left (a hold that ends serves the waiters it
-- kept out), or below 0 when (owner, token) no longer holds it: -1, or -2 when it had been
-- evicted with a lock delay, which this release ends.
return drop_hold(lock_keys(ARGV[1]), ARGV[2], ARGV[3])
