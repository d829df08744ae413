#pragma once

// Shared holds on sqlite:// (readers and semaphore permits; include/dlock/backend.hpp, "Shared
// holds"). Exclusive holds keep their one-statement path on dlock_locks; a key with shared
// holders has one row per holder in dlock_shared, and its dlock_locks row carries the marker
// owner kSharedOwner with the key's last token and the latest holder's expiry, so the
// exclusive acquire sees the key held without knowing of shared holds. Every function runs on
// a connection whose kSharedSchema tables exist; those that write open their own transaction.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "backends/sqlite/connection.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::sqlite {

// One attempt at a shared hold, in one IMMEDIATE transaction.
backend::AcquireResult acquire_shared(Connection& connection, const backend::AcquireRequest& request,
                                      std::int64_t ttl_us);
// The live shared holders of `key` (with `token`, only that one).
std::vector<LockInfo> shared_holders(Connection& connection, std::string_view key,
                                     std::optional<std::uint64_t> token = std::nullopt);
// A waiting writer found the key held: new shared holders wait until it has had its turn.
void place_writer_claim(Connection& connection, std::string_view key);
bool renew_shared(Connection& connection, const backend::LeaseRef& lease, std::int64_t ttl_us);
// Nothing when no shared hold is (owner, token); else Backend::release's answer (nothing
// again for an evicted holder, whose release ends its hold).
std::optional<std::optional<std::uint32_t>> release_shared(Connection& connection, const backend::LeaseRef& lease);
// Inside the caller's transaction: evicts the shared holder with `token`, or every one.
std::vector<LockInfo> force_release_shared(Connection& connection, std::string_view key, Eviction eviction,
                                           std::optional<std::uint64_t> token);
// Drops expired shared holds and the settings of keys without any.
void collect_idle_shared(Connection& connection);

}  // namespace dlock::backends::sqlite
