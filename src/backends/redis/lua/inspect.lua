-- KEYS[1] the lock, KEYS[2] its queue. {waiters, rows...} (holders.lua's rows; none when free).
local L = named(KEYS[1])
local x, s = holders_of(L)
return rows(L, x, s, {redis.call('LLEN', KEYS[2])})
