-- One page of held locks from the index. KEYS[1] dlock:held; ARGV: namespace ('dlock'),
-- ZRANGEBYLEX min and max, want (locks to find), cap (index entries to look at, at most).
-- Entries whose lease ran out are dropped from the index on the way. Returns {done, last
-- looked at, key1, owner1, token1, holds1, pttl1, held_ms1, waiters1, key2, ...}; done is 1
-- when the range ended.
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
    local lock = ns .. ':{' .. key .. '}'
    local o, t, holds, at = read_lock(lock)
    if o then
      found = found + 1
      local row = {key, o, t, holds, redis.call('PTTL', lock), held_ms(at), redis.call('LLEN', lock .. ':q')}
      for _, v in ipairs(row) do out[#out + 1] = v end
    else
      redis.call('ZREM', KEYS[1], key)
    end
  end
  min = '(' .. out[2]
end
return out
