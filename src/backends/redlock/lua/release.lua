-- KEYS[1..8]; ARGV: key, owner, token, alive_ms ('0': no bell, when undoing a partial
-- acquisition). The holds left (a hold that ends rings the bell), or below 0 when (owner,
-- token) no longer holds it here: -1, or -2 when it had been evicted with a lock delay, which
-- this release ends (and rings the bell).
local left = drop_hold(lock_keys(ARGV[1]), ARGV[2], ARGV[3])
if (left == 0 or left == -2) and ARGV[4] ~= '0' then ring(KEYS[7], KEYS[8], ARGV[4]) end
return left
