-- One page of held locks from the index. KEYS[1] dlock:held; ARGV: namespace ('dlock'),
-- ZRANGEBYLEX min and max, want (locks to find), cap (index entries to look at, at most).
-- Entries without a holder are dropped from the index on the way. Returns {done, last looked
-- at, rows...}, a row per holder: {key, holders.lua's row, waiters}; done is 1 when the range
-- ended.
local ns, min, max, want, cap = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {0, ''}
local found, seen = 0, 0
while found < want and seen < cap do
  local batch = redis.call('ZRANGEBYLEX', KEYS[1], min, max, 'LIMIT', 0, math.min(want - found, cap - seen))
  if #batch == 0 then
    out[1] = 1
    break
  end
  for _, key in ipairs(batch) do
    seen = seen + 1
    out[2] = key
    local L = named(ns .. ':{' .. key .. '}')
    local x, s = holders_of(L)
    if x or #s > 0 then
      found = found + 1
      rows(L, x, s, out, {key}, {redis.call('LLEN', L.lock .. ':q')})
    else
      redis.call('ZREM', KEYS[1], key)
    end
  end
  min = '(' .. out[2]
end
return out
