#pragma once

// Plain value types shared by the client API and the backend interface.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dlock/export.hpp"

namespace dlock {

// Keys are 1..kMaxKeyBytes bytes of valid UTF-8 without control characters (no NUL, no
// newline). A backend may accept fewer bytes (Backend::max_key_bytes); the error says so.
inline constexpr std::size_t kMaxKeyBytes = 1024;
// Owners are 1..kMaxOwnerBytes bytes of printable ASCII without spaces.
inline constexpr std::size_t kMaxOwnerBytes = 128;
// The most waiting owners LockInfo::queue names.
inline constexpr std::size_t kQueueShown = 32;

// How a holder holds its key. A key has no holder, one exclusive holder, or several shared
// holders: a read-write lock's readers, or a semaphore's permit holders (dlock/shared_lock.hpp;
// stores with backend::Capabilities::shared_holders).
enum class LockMode {
  exclusive,
  shared,
};

DLOCK_EXPORT const char* to_string(LockMode mode) noexcept;

// One holder of a key as the backend sees it; a key with several holders is described by one
// LockInfo each, and each holder has its own owner, token, hold count and lease. ttl_left is
// measured by the backend's clock at the moment it answered; it says nothing about the
// caller's clock.
struct LockInfo {
  std::string key;
  std::string owner;
  std::uint64_t token = 0;       // fencing token of this holder's acquisition
  std::uint32_t hold_count = 0;  // re-entries by the owner; 1 after a plain acquire
  std::chrono::milliseconds ttl_left{0};
  // Time since this acquisition took the key (re-entries and renewals do not reset it), by
  // the backend's clock; nothing where the store does not record it (mysql:// row mode).
  std::optional<std::chrono::milliseconds> held_for;
  // Clients queued for the key, where the store keeps a queue (redis://; inspect and list
  // only); nothing elsewhere. The key's, so the same on each of its holders.
  std::optional<std::uint32_t> waiters;
  // The waiting owners, first in line first, where the store keeps its queue in order
  // (zookeeper://, up to kQueueShown of them; inspect and list only); nothing elsewhere. The
  // key's, so the same on each of its holders.
  std::optional<std::vector<std::string>> queue;
  // Force-released with a lock delay (Eviction::delayed): the holder has been told its lease is
  // gone, and the key stays closed to new holders until that holder releases it (acknowledging
  // the loss) or its lease runs out, whichever is first. hold_count is 0 then.
  bool evicted = false;
  LockMode mode = LockMode::exclusive;
};

// How a force-release treats the evicted holder, which learns of it only at its next renewal
// (or, where the store can notify, within about a second).
enum class Eviction {
  // The default (Chubby's lock delay): the key stays closed to new holders until the evicted
  // holder has released it or its lease would have run out, so it never overlaps the next.
  delayed,
  // The key is free at once: the next holder may run while the evicted one still does.
  immediate,
};

// What clients did, as counters. Each client counts its own (Client::activity) and adds them
// to the store's totals every few seconds and when it closes; `dlock serve` exports those
// totals on /metrics.
struct Activity {
  std::uint64_t acquisitions = 0;  // new acquisitions (a re-entry is not one)
  std::uint64_t conflicts = 0;     // acquire calls whose first attempt found the key held
  std::uint64_t waits = 0;         // acquire calls that waited for the key
  std::uint64_t wait_us = 0;       // microseconds those calls spent waiting, in total
  std::uint64_t renewals = 0;      // successful renewals, automatic or explicit
  std::uint64_t losses = 0;        // leases lost (expired, taken over, renewals failing)

  Activity& operator+=(const Activity& other) noexcept;
  Activity operator-(const Activity& other) const noexcept;
  bool empty() const noexcept { return *this == Activity{}; }
  bool operator==(const Activity&) const = default;
};

// One page of Client::list: one LockInfo per holder, in key order, the holders of one key
// together and never split between pages. Pass next_after (the page's last key) back as
// `after` to get the next page; it is empty on the last page.
struct ListPage {
  std::vector<LockInfo> locks;
  std::string next_after;
};

// Why a lease stopped being ours.
enum class LossReason {
  expired,         // its TTL ran out without a successful renewal
  not_owner,       // the backend says another acquisition (or nobody) holds the key now
  renewal_failed,  // renewals kept failing until the lease could no longer be trusted
};

struct LossInfo {
  std::string key;
  std::uint64_t token = 0;
  LossReason reason = LossReason::expired;
  std::string message;
};

DLOCK_EXPORT const char* to_string(LossReason reason) noexcept;

}  // namespace dlock
