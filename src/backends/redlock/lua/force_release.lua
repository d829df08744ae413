-- KEYS[1..8]; ARGV: key, alive_ms, delayed ('1': a lock delay; '0': end the holds at once and
-- ring the bell), the notice channel, the holder's token ('' for every holder). Returns the rows
-- of what was held (redis://'s holders.lua), none when nothing matched.
local delayed = ARGV[3] == '1'
local held = evict(lock_keys(ARGV[1]), delayed, ARGV[4], ARGV[5])
if #held > 0 and not delayed then ring(KEYS[7], KEYS[8], ARGV[2]) end
return held
