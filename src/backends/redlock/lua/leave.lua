-- A waiter stops waiting. KEYS[1] dlock:{K}:sl, KEYS[2] dlock:{K}:bell; ARGV: waiter id,
-- alive_ms, pass ('1': it took a bell it will not use, which goes to the next waiter).
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[3] == '1' then ring(KEYS[1], KEYS[2], ARGV[2]) end
return 1
