-- Adds one client's counts to the store's totals. KEYS[1] dlock:activity (a hash);
-- ARGV: acquisitions, conflicts, waits, wait_us, renewals, losses.
local fields = {'acquisitions', 'conflicts', 'waits', 'wait_us', 'renewals', 'losses'}
for i, field in ipairs(fields) do
  if ARGV[i] ~= '0' then redis.call('HINCRBY', KEYS[1], field, ARGV[i]) end
end
return 1
