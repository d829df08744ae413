-- A waiter stops waiting, or passes a bell on. KEYS[1] dlock:{K}:sl, KEYS[2] dlock:{K}:bell;
-- ARGV: waiter id, alive_ms, pass ('1': it took a bell it will not use, which goes to another
-- waiter), stay ('1': it keeps waiting, registered).
if ARGV[4] ~= '1' then redis.call('ZREM', KEYS[1], ARGV[1]) end
if ARGV[3] == '1' then ring(KEYS[1], KEYS[2], ARGV[2], ARGV[1]) end
return 1
