-- Drops one hold of each lease (Backend::release_set), by release.lua's rules: a hold that ends
-- serves the waiters it kept out. KEYS: the indexes, then dlock:{K}, :seq, :q, :qi of each lock
-- (common.lua's set_lock); ARGV per lock: key, owner, token. Returns release.lua's answer per
-- lock, in order.
local out = {}
for i = 1, set_count(4) do
  local L, _, a = set_lock(i, 4, 1, 3)
  out[i] = drop_hold(L, ARGV[a + 1], ARGV[a + 2])
end
return out
