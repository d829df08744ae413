-- Prepended after queue.lua: one attempt at one lock, in two steps, so that a set of locks
-- (acquire_set.lua) looks at every key before it takes any, by the same rules as acquire.lua.

-- Whether (owner, shared, permits) may have the key now, changing nothing of its holders: nil
-- when it may (`mine`: the owner's hold it re-enters, if any), else why not (refusal's reasons,
-- or 'queued': fair mode's waiter that must wait stands before it). Also the live holders, x
-- and s. Fair mode serves the queue first, up to `id`'s entry ('' for the whole queue), so no
-- one overtakes a waiter that must wait. `behind`: a reader that waited behind a writer.
local function look(L, owner, shared, permits, fair, id, behind)
  local x, s = holders_of(L)
  -- A re-entry: the owner's live, unevicted hold, in either mode, except a reader asking to write.
  for _, h in ipairs(x and {x} or s) do
    if h.owner == owner and h.holds > 0 and (h.shared == false or shared) then return nil, x, s, h end
  end
  local queued_ahead = fair and not serve(L, id)
  if fair then x, s = holders_of(L) end
  local why = refusal(L, x, s, shared, permits, behind)
  if not why and queued_ahead then why = 'queued' end
  return why, x, s
end

-- Takes the key that look() found free: one more hold of `mine`, its lease extended to ttl from
-- now, never shortened; or a new acquisition. Returns the token and the holds.
local function take(L, owner, ttl, shared, permits, mine)
  if mine then
    mine.holds = mine.holds + 1
    extend(L, mine, ttl, true)
    return mine.token, mine.holds
  end
  return grant(L, owner, ttl, shared, permits), 1
end

-- acquire.lua's answer to a refused attempt: {2, permits} when the shared holders' permits
-- differ from the request's; else {0, now_us, retry_ms, rows...}, the writer's claim placed
-- for a waiting writer.
local function refused(L, x, s, why, shared, waiting, claim_ms, now)
  if why == 'mismatch' then return {2, s[1].permits} end
  return rows(L, x, s, {0, num(now), retry_ms(L, x, s, why, shared, waiting, claim_ms)})
end

-- acquire.lua's step (KEYS, ARGV and the answer there).
local function acquire_step()
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
end
