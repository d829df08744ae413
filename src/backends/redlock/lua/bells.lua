-- Prepended to redlock://'s own scripts, after redis://'s. Waking waiters on one server: a
-- waiter registers in dlock:{K}:sl (sorted set, waiter id -> alive_until_ms) and blocks in BLPOP
-- on dlock:{K}:bell. Ending a hold pushes one bell when a live waiter is registered (other than
-- `except`, a waiter passing its bell on) and fewer bells than such waiters are pending, so a
-- release wakes one waiter per server, however many wait.

local function ring(sleepers, bell, alive_ms, except)
  if redis.call('EXISTS', sleepers) == 0 then return end
  redis.call('ZREMRANGEBYSCORE', sleepers, '-inf', math.floor(now_us() / 1000))
  local n = redis.call('ZCARD', sleepers)
  if except and redis.call('ZSCORE', sleepers, except) then n = n - 1 end
  if n > 0 and redis.call('LLEN', bell) < n then
    redis.call('RPUSH', bell, '1')
    -- A bell nobody takes only causes one needless attempt, and not for long.
    redis.call('PEXPIRE', bell, alive_ms)
  end
end
