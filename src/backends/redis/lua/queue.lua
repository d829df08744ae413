-- Prepended after holders.lua: the waiters' queue, and the steps that end holds and so serve it.

-- A queued waiter's entry: {ttl, owner, shared, permits}, or nil when it is gone or dead (not
-- refreshed in time: a killed waiter).
local function entry_of(L, id)
  local entry = redis.call('HGET', L.waiters, id)
  if not entry then return nil end
  local alive, ttl, owner, permits = string.match(entry, '^(%d+) (%d+) (%S+) ?(%d*)$')
  if tonumber(alive) <= now_ms() then return nil end
  return {ttl = ttl, owner = owner, shared = permits ~= '', permits = tonumber(permits) or 0}
end

local function leave_queue(L, id)
  redis.call('LREM', L.queue, 1, id)
  redis.call('HDEL', L.waiters, id)
end

-- The first live waiter's id, dropping dead ones at the head on the way; nil when none.
local function first_live(L)
  while true do
    local id = redis.call('LINDEX', L.queue, 0)
    if not id or entry_of(L, id) then return id end
    redis.call('LPOP', L.queue)
    redis.call('HDEL', L.waiters, id)
  end
end

-- Adds the waiter at the back of the queue, or refreshes its entry where it stands.
local function enqueue(L, id, owner, ttl, alive_ms, shared, permits)
  local entry = num(now_ms() + alive_ms) .. ' ' .. ttl .. ' ' .. owner .. (shared and ' ' .. permits or '')
  if redis.call('HSET', L.waiters, id, entry) == 1 then redis.call('RPUSH', L.queue, id) end
end

-- Hands the key to the waiters at the head of the queue that may have it now, in order: each
-- gets a new token, its TTL, one hold, and "token handoff_us" in its box, where its BLPOP is
-- waiting. Consecutive shared waiters are all served (up to the permits). A shared waiter kept
-- out only by the writer's claim (or by other permits) is passed over, so the writer behind
-- it gets the key once it is free; any other waiter that must wait stops the serving, so none
-- behind it overtakes it. Stops before `stop_id`'s entry. Returns false when stopped by a
-- waiter that must wait, true otherwise.
local function serve(L, stop_id)
  local i, x, s = 0, nil, nil
  while true do
    local id = redis.call('LINDEX', L.queue, i)
    if not id or id == stop_id then return true end
    local w = entry_of(L, id)
    if not w then
      leave_queue(L, id)
    else
      if not s then x, s = holders_of(L) end
      local why = refusal(L, x, s, w.shared, w.permits)
      if why == 'claim' or why == 'mismatch' then
        i = i + 1
      elseif why then
        return false
      else
        leave_queue(L, id)
        local token = grant(L, w.owner, w.ttl, w.shared, w.permits)
        local box = L.lock .. ':w:' .. id
        redis.call('RPUSH', box, token .. ' ' .. num(now_us()))
        -- An unclaimed handoff means nothing once its lease is over.
        redis.call('PEXPIRE', box, w.ttl)
        x, s = holders_of(L)
      end
    end
  end
end

-- Ends a hold: the holder is dropped and the waiters it kept out are served.
local function end_hold(L, h)
  remove(L, h)
  serve(L)
end

-- Drops one hold of (owner, token); the last one ends the hold. Returns the holds left; -1 when
-- that acquisition no longer holds the key; -2 when it was evicted with a lock delay: its
-- release acknowledges the loss, and its hold ends.
local function drop_hold(L, owner, token)
  local h = find(L, owner, token)
  if not h then return -1 end
  if h.holds == 0 then
    end_hold(L, h)
    return -2
  end
  if h.holds > 1 then
    h.holds = h.holds - 1
    save(L, h)
    return h.holds
  end
  end_hold(L, h)
  return 0
end

-- The key handed to the waiter of `box`, not claimed yet: its token, holds and handoff_us, or
-- nil. A handoff evicted meanwhile is acknowledged at once (the waiter never ran under it):
-- its hold ends, and nil is returned.
local function claim(L, box, owner)
  local token, at = string.match(redis.call('LPOP', box) or '', '^(%d+) (%d+)$')
  if not token then return nil end
  local h = find(L, owner, token)
  if not h then return nil end
  if h.holds == 0 then
    end_hold(L, h)
    return nil
  end
  return token, h.holds, at
end

-- Evicts the key's holders, or only the one whose token is `token` ('' for all). Delayed (a
-- lock delay): each stays recorded with its token and lease, hold count 0, and still counts as
-- a holder until it releases or its lease runs out. Otherwise its hold ends at once. Either
-- way the key is published on `channel`, for holders to learn at once (a store without the
-- channel permission only loses the notice). Returns the rows of what was held (holders.lua).
local function evict(L, delayed, channel, token)
  local x, s = holders_of(L)
  local out, ended = {}, false
  for _, h in ipairs(x and {x} or s) do
    if token == '' or h.token == token then
      if h.shared then rows(L, nil, {h}, out) else rows(L, h, {}, out) end
      if not delayed then
        remove(L, h)
        ended = true
      elseif h.holds > 0 then
        h.holds = 0
        save(L, h)
      end
    end
  end
  if ended then serve(L) end
  if #out > 0 then redis.pcall('PUBLISH', channel, L.key) end
  return out
end

-- How soon a refused request should look again: when the first holder's lease ends, or the
-- claim that refused it does. A waiting writer places (or renews) the writer's claim, and a
-- waiting reader that a writer refused the readers' claim on its token, where kept; either
-- looks again within half of it. A waiting reader the writer's claim refused marks it ('2',
-- kept by the writer's renewals) for holders.lua's readers_held_back.
local function retry_ms(L, x, s, why, shared, waiting, claim_ms)
  local retry = math.huge
  for _, h in ipairs(x and {x} or s) do retry = math.min(retry, pttl(L, h)) end
  if why == 'claim' then
    retry = math.min(retry, redis.call('PTTL', L.claim))
    if waiting then redis.call('SET', L.claim, '2', 'KEEPTTL') end
  end
  if why == 'readers' then retry = math.min(retry, redis.call('PTTL', L.readers)) end
  local claim
  if waiting and not shared then
    claim = {L.claim, redis.call('GET', L.claim) or '1'}
  elseif waiting and x and readers_claims then
    claim = {L.readers, x.token}
  end
  if claim then
    redis.call('SET', claim[1], claim[2], 'PX', claim_ms)
    retry = math.min(retry, math.floor(tonumber(claim_ms) / 2))
  end
  if retry == math.huge then retry = tonumber(claim_ms) end  -- unreachable: a refusal has a holder or a claim
  return math.max(retry, 1)
end
