-- A waiter gives up. KEYS[1..7]; ARGV: key, owner, waiter id. Removes its entry, and passes on a
-- key handed to it that it never claimed. Returns 1 when it passed one on.
local key, owner, id = ARGV[1], ARGV[2], ARGV[3]
local L = lock_keys(key)
leave_queue(L, id)
local handed = redis.call('LPOP', KEYS[7])
redis.call('DEL', KEYS[7])
if not handed then return 0 end
if drop_hold(L, owner, string.match(handed, '^(%d+) ')) == -1 then return 0 end
return 1
