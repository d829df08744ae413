-- Acquire, or report the holders, in one step. KEYS[1..6] (and [7], the box, for a waiter);
-- ARGV: key, owner, ttl_ms, fair (1 or 0), waiter id ('' for a plain attempt), alive_ms, shared
-- (1 or 0), permits, waiting (1 or 0: sent by a waiting call), claim_ms (the writer's claim).
-- Returns {1, token, holds[, handoff_us]} when the key is ours ({..., handoff_us} when it was
-- handed to this waiter earlier); {2, permits} when the shared holders' permits differ from
-- this request's; or {0, now_us, retry_ms, rows...} when refused (holders.lua's rows; now_us
-- only for a waiter, 0 otherwise).
local key, owner, ttl, fair, id, alive_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5], tonumber(ARGV[6])
local shared, permits, waiting, claim_ms = ARGV[7] == '1', tonumber(ARGV[8]), ARGV[9] == '1', ARGV[10]
local L = lock_keys(key)
if id ~= '' then
  local token, holds, at = claim(L, KEYS[7], owner)
  if token then return {1, token, holds, at} end
end
local x, s = holders_of(L)
-- A re-entry: the owner's live, unevicted hold, in either mode, except a reader asking to write.
for _, h in ipairs(x and {x} or s) do
  if h.owner == owner and h.holds > 0 and (h.shared == false or shared) then
    h.holds = h.holds + 1
    extend(L, h, ttl, true)
    if id ~= '' then leave_queue(L, id) end
    return {1, h.token, h.holds}
  end
end
-- Fair mode serves the queue first, up to the caller's own entry: no one overtakes a waiter
-- that must wait.
local queued_ahead = fair and not serve(L, id)
if fair then x, s = holders_of(L) end
local why = refusal(L, x, s, shared, permits)
if why == 'mismatch' then return {2, s[1].permits} end
if not why and queued_ahead then why = 'queued' end
if not why then
  local token = grant(L, owner, ttl, shared, permits)
  if id ~= '' then leave_queue(L, id) end
  return {1, token, 1}
end
local retry = retry_ms(L, x, s, why, shared, waiting, claim_ms)
local now = 0
if id ~= '' then
  now = now_us()
  enqueue(L, id, owner, ttl, alive_ms, shared, permits)
end
return rows(L, x, s, {0, num(now), retry})
