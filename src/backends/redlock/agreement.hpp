#pragma once

// What the servers' answers agree on: the holders a majority names, and the answer to an
// attempt they refused.

#include <chrono>
#include <cstddef>
#include <vector>

#include "dlock/backend.hpp"
#include "dlock/types.hpp"

namespace dlock::backends::redlock {

// The holders `quorum` servers agree on (`seen`: every server's holders in turn), an owner and
// mode at a time; with `any`, the one seen most when none has a majority.
std::vector<LockInfo> agreed(const std::vector<LockInfo>& seen, std::size_t quorum, bool any = false);

// The answer to an attempt that the servers in `refusals` refused (`answered` servers answered):
// their holders, and when to try again; `backoff` when the servers disagree.
backend::Busy contended(const std::vector<backend::Busy>& refusals, std::size_t answered, std::size_t quorum,
                        std::chrono::milliseconds backoff);

}  // namespace dlock::backends::redlock
