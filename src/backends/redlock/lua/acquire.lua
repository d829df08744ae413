-- redis://'s acquire.lua (KEYS[1..6] and ARGV as there; ARGV[6], alive_ms, for the bell),
-- and a writer's grant that ends a writer's claim which refused a waiting reader wakes every
-- waiter registered here (KEYS[7] dlock:{K}:sl, KEYS[8] dlock:{K}:bell): the readers it held
-- back look again, find the writer and wait behind it (backend.hpp, "Shared holds"). A release
-- would wake one of them only, which would enter alone before the writer's next claim.
local answer = acquire_step()
if readers_held_back then ring(KEYS[7], KEYS[8], ARGV[6], nil, true) end
return answer
