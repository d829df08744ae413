-- Drops one hold of each lease (Backend::release_set), by release.lua's rules: a hold that ends
-- serves the waiters it kept out. KEYS: the indexes, then dlock:{K}, :seq, :q, :qi of each lock
-- (common.lua's set_lock); ARGV per lock: key, owner, token. Returns release.lua's answer per
-- lock, in order.
local n = set_count(4)
local locks, values = {}, {}
for i = 1, n do
  local L, _, a = set_lock(i, 4, 1, 3)
  locks[i], values[i] = {L = L, owner = ARGV[a + 1], token = ARGV[a + 2]}, L.lock
end
values = redis.call('MGET', unpack(values))

-- The usual lease, the exclusive holder's only hold, ends here as drop_hold() would end it: the
-- holders dropped and unindexed in one call each (no shared holder lives beside an exclusive
-- one), and the waiters of any key that has some served. The other leases take drop_hold().
local out, ended, names, queues = {}, {}, {}, {}
for i, r in ipairs(locks) do
  local token, holds, owner = string.match(values[i] or '', '^(%d+) (%d+) %d+ (.+)$')
  if token == r.token and owner == r.owner and holds == '1' then
    out[i], ended[#ended + 1] = 0, r.L
    names[#names + 1], queues[#queues + 1] = r.L.key, r.L.queue
  else
    out[i] = drop_hold(r.L, r.owner, r.token)
  end
end
if #ended > 0 then
  local lockkeys = {}
  for j, L in ipairs(ended) do lockkeys[j] = L.lock end
  redis.call('DEL', unpack(lockkeys))
  redis.call('ZREM', ended[1].held, unpack(names))
  if redis.call('EXISTS', unpack(queues)) > 0 then
    for _, L in ipairs(ended) do serve(L) end
  end
end
return out
