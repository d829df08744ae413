#pragma once

// Exclusive holds of several keys in one statement each (Backend::acquire_set, release_set):
// the keys go to SQLite as one JSON parameter, so a set costs about what one key does. Only
// sets of one owner's requests, as the core sends them.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "backends/sqlite/connection.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::sqlite {

// One try-once attempt at every request (exclusive, distinct keys in order), all or none, in
// one transaction. A SetBusy names the holder of its key's row, which may be the marker of
// shared holds. Nothing when the requests have several owners.
std::optional<backend::AcquireSetResult> acquire_set(Connection& connection,
                                                    std::span<const backend::AcquireRequest> requests);

// Drops one hold of each lease that is a live hold on dlock_locks, in one statement: the holds
// left, in order, and nothing for any other lease (gone, evicted, shared, or of another owner
// than the first), which release() must still see to.
std::vector<std::optional<std::uint32_t>> release_set(Connection& connection,
                                                      std::span<const backend::LeaseRef> leases);

}  // namespace dlock::backends::sqlite
