-- Acquire, or report the holders, in one step. KEYS[1..6] (and [7], the box, for a waiter);
-- ARGV: key, owner, ttl_ms, fair (1 or 0), waiter id ('' for a plain attempt), alive_ms, shared
-- (1 or 0), permits, waiting (1 or 0: sent by a waiting call), claim_ms (the writer's claim),
-- behind (1 or 0: a reader that waited behind a writer, AcquireRequest::waited_behind),
-- readers (1 or 0: keep the readers' claim, holders.lua).
-- Returns {1, token, holds[, handoff_us]} when the key is ours ({..., handoff_us} when it was
-- handed to this waiter earlier); {2, permits} when the shared holders' permits differ from
-- this request's; or {0, now_us, retry_ms, rows...} when refused (holders.lua's rows; now_us
-- only for a waiter, 0 otherwise).
local key, owner, ttl, fair, id, alive_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5], tonumber(ARGV[6])
local shared, permits, waiting, claim_ms = ARGV[7] == '1', tonumber(ARGV[8]), ARGV[9] == '1', ARGV[10]
local behind = ARGV[11] == '1'
readers_claims = ARGV[12] == '1'
local L = lock_keys(key)
if id ~= '' then
  local token, holds, at = claim(L, KEYS[7], owner)
  if token then return {1, token, holds, at} end
end
local why, x, s, mine = look(L, owner, shared, permits, fair, id, behind)
if not why then
  local token, holds = take(L, owner, ttl, shared, permits, mine)
  if id ~= '' then leave_queue(L, id) end
  return {1, token, holds}
end
local now = 0
if id ~= '' and why ~= 'mismatch' then
  now = now_us()
  enqueue(L, id, owner, ttl, alive_ms, shared, permits)
end
return refused(L, x, s, why, shared, waiting, claim_ms, now)
