-- KEYS[1] the lock; ARGV: owner, token, ttl_ms. 0 when the lease is no longer (owner, token)'s
-- (gone, taken over, or evicted); otherwise it now ends ttl_ms from now, and the answer is 1 +
-- the holder's permits (0 for a writer or a reader), which redlock:// needs.
local L = named(KEYS[1])
local h = find(L, ARGV[1], ARGV[2])
if not h or h.holds == 0 then return 0 end
extend(L, h, ARGV[3], false)
return 1 + (h.permits or 0)
