-- Several keys in one step, all or none (Backend::acquire_set): a try-once attempt at each, by
-- acquire.lua's rules, every key looked at before any is taken. KEYS: the indexes, then
-- dlock:{K}, :seq, :q, :qi of each lock (common.lua's set_lock); ARGV: fair (1 or 0), claim_ms,
-- readers (1 or 0: keep the readers' claim, holders.lua), then per lock: key, owner, ttl_ms,
-- shared (1 or 0), permits. Returns {1, answer...}, one
-- acquire.lua answer {1, token, holds} per lock, or {0, index, answer} with the first refused
-- lock's index (from 0) and its acquire.lua answer; then nothing was taken (a fair look may
-- have served a queue, as any attempt there would).
local fair, claim_ms = ARGV[1] == '1', ARGV[2]
readers_claims = ARGV[3] == '1'
local n = set_count(4)
local locks, exclusive = {}, true
for i = 1, n do
  local L, _, a = set_lock(i, 4, 4, 5)
  locks[i] = {L = L, owner = ARGV[a + 1], ttl = ARGV[a + 2], shared = ARGV[a + 3] == '1', permits = tonumber(ARGV[a + 4])}
  exclusive = exclusive and not locks[i].shared
end

-- The usual set of writers finds every key without holders (nor, in fair mode, waiters): one
-- look at all of them, and each key granted as grant() would, the claims ended and the keys
-- indexed in one call each.
if exclusive then
  local names = {}
  for _, r in ipairs(locks) do
    names[#names + 1], names[#names + 2] = r.L.lock, r.L.shared
    if fair then names[#names + 1] = r.L.queue end
    if readers_claims then names[#names + 1] = r.L.readers end
  end
  if redis.call('EXISTS', unpack(names)) == 0 then
    local out, claims, held, at = {1}, {}, {}, num(now_ms())
    for i, r in ipairs(locks) do
      local token = num(next_token(r.L))
      redis.call('SET', r.L.lock, lock_value(token, 1, at, r.owner), 'PX', r.ttl)
      claims[i], held[2 * i - 1], held[2 * i] = r.L.claim, 0, r.L.key
      out[i + 1] = {1, token, 1}
    end
    redis.call('DEL', unpack(claims))
    redis.call('ZADD', locks[1].L.held, unpack(held))
    return out
  end
end

for i, r in ipairs(locks) do
  local why, x, s, mine = look(r.L, r.owner, r.shared, r.permits, fair, '')
  if why then return {0, i - 1, refused(r.L, x, s, why, r.shared, false, claim_ms, 0)} end
  r.mine = mine
end
local out = {1}
for i, r in ipairs(locks) do
  local token, holds = take(r.L, r.owner, r.ttl, r.shared, r.permits, r.mine)
  out[i + 1] = {1, token, holds}
end
return out
