-- collect_idle over one batch of the known keys. KEYS[1] dlock:keys, KEYS[2] dlock:held;
-- ARGV: namespace, ZRANGEBYLEX min, batch size. A key is removed (its counter, queue and
-- index entries) when it has no holder, no live waiter is queued, no writer's claim lives
-- (it keeps its key, as local:// does), and its last token is below the server's clock in
-- microseconds: the next token, drawn from that clock (next_token), is then above it.
-- Returns {removed, done, last key looked at}.
local ns, min, batch = ARGV[1], ARGV[2], tonumber(ARGV[3])
local keys = redis.call('ZRANGEBYLEX', KEYS[1], min, '+', 'LIMIT', 0, batch)
local now = now_us()
local removed = 0
for _, key in ipairs(keys) do
  local L = keys_of(ns .. ':{' .. key .. '}', key, KEYS[2], KEYS[1])
  local x, s = holders_of(L)
  if not x and #s == 0 and redis.call('EXISTS', L.claim) == 0 and not first_live(L) then
    local last = redis.call('GET', L.seq)
    if not last or tonumber(last) < now then
      redis.call('DEL', L.seq, L.queue, L.waiters, L.shared)
      redis.call('ZREM', KEYS[1], key)
      redis.call('ZREM', KEYS[2], key)
      removed = removed + 1
    end
  end
end
return {removed, #keys < batch and 1 or 0, keys[#keys] or ''}
