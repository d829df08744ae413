-- KEYS[1..6]; ARGV: key, delayed ('1': a lock delay; '0': end the holds at once), the notice
-- channel, the holder's token ('' for every holder). Returns the rows of what was held
-- (holders.lua), none when nothing matched.
return evict(lock_keys(ARGV[1]), ARGV[2] == '1', ARGV[3], ARGV[4])
