-- KEYS[1..8]; ARGV: key, owner, token, alive_ms ('0': no bell, when undoing a partial
-- acquisition). The holds left (a hold that ends rings the bell), or below 0 when (owner,
-- token) no longer holds it here: -1, or -2 when it had been evicted with a lock delay, which
-- this release ends (and rings the bell).
return release_ringing(lock_keys(ARGV[1]), ARGV[2], ARGV[3], KEYS[7], KEYS[8], ARGV[4])
