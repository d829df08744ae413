-- A waiter registers on this server, or stays registered, before it attempts and sleeps.
-- KEYS[1] dlock:{K}:sl; ARGV: waiter id, alive_ms. An entry not refreshed within alive_ms
-- (a killed waiter) gets no bell.
local alive = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], math.floor(now_us() / 1000) + alive, ARGV[1])
redis.call('PEXPIRE', KEYS[1], alive)
return 1
