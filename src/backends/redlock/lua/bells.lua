-- Prepended to redlock://'s own scripts, after redis://'s. Waking waiters on one server: a
-- waiter registers in dlock:{K}:sl (sorted set, waiter id -> alive_until_ms) and blocks in BLPOP
-- on dlock:{K}:bell. Ending a hold pushes one bell when a live waiter is registered (other than
-- `except`, a waiter passing its bell on) and fewer bells than such waiters are pending, so a
-- release wakes one waiter per server, however many wait. With `all`, as many bells as such
-- waiters are pending: every one wakes.

local function ring(sleepers, bell, alive_ms, except, all)
  if redis.call('EXISTS', sleepers) == 0 then return end
  redis.call('ZREMRANGEBYSCORE', sleepers, '-inf', math.floor(now_us() / 1000))
  local n = redis.call('ZCARD', sleepers)
  if except and redis.call('ZSCORE', sleepers, except) then n = n - 1 end
  local pending = redis.call('LLEN', bell)
  if n > pending then
    local bells = {}
    for i = 1, all and n - pending or 1 do bells[i] = '1' end
    redis.call('RPUSH', bell, unpack(bells))
    -- A bell nobody takes only causes one needless attempt, and not for long.
    redis.call('PEXPIRE', bell, alive_ms)
  end
end

-- Drops one hold of (owner, token) by redis://'s rules, ringing the bell when the hold ends
-- (unless alive_ms is '0': undoing a partial acquisition wakes no one). Returns the holds left,
-- as release.lua does.
local function release_ringing(L, owner, token, sleepers, bell, alive_ms)
  local left = drop_hold(L, owner, token)
  if (left == 0 or left == -2) and alive_ms ~= '0' then ring(sleepers, bell, alive_ms) end
  return left
end
