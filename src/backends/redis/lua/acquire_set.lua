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
local looked = {}
for i = 1, set_count(4) do
  local L, _, a = set_lock(i, 4, 4, 5)
  local r = {L = L, owner = ARGV[a + 1], ttl = ARGV[a + 2], shared = ARGV[a + 3] == '1', permits = tonumber(ARGV[a + 4])}
  local why, x, s, mine = look(L, r.owner, r.shared, r.permits, fair, '')
  if why then return {0, i - 1, refused(L, x, s, why, r.shared, false, claim_ms, 0)} end
  r.mine = mine
  looked[i] = r
end
local out = {1}
for i, r in ipairs(looked) do
  local token, holds = take(r.L, r.owner, r.ttl, r.shared, r.permits, r.mine)
  out[i + 1] = {1, token, holds}
end
return out
