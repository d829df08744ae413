-- release.lua for several leases in one step (Backend::release_set). KEYS: the indexes, then
-- dlock:{K}, :seq, :q, :qi, :sl, :bell of each lock (common.lua's set_lock); ARGV: alive_ms
-- ('0': no bell), then per lock: key, owner, token. Returns release.lua's answer per lock.
local out = {}
for i = 1, set_count(6) do
  local L, k, a = set_lock(i, 6, 2, 3)
  out[i] = release_ringing(L, ARGV[a + 1], ARGV[a + 2], KEYS[k + 4], KEYS[k + 5], ARGV[1])
end
return out
