#pragma once

// Plain value types shared by the client API and the backend interface.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dlock/export.hpp"

namespace dlock {

// Keys are 1..kMaxKeyBytes bytes of valid UTF-8 without control characters (no NUL, no
// newline). A backend may accept fewer bytes (Backend::max_key_bytes); the error says so.
inline constexpr std::size_t kMaxKeyBytes = 1024;
// Owners are 1..kMaxOwnerBytes bytes of printable ASCII without spaces.
inline constexpr std::size_t kMaxOwnerBytes = 128;

// A held lock as the backend sees it. ttl_left is measured by the backend's clock at the
// moment it answered; it says nothing about the caller's clock.
struct LockInfo {
  std::string key;
  std::string owner;
  std::uint64_t token = 0;       // fencing token of the current acquisition
  std::uint32_t hold_count = 0;  // re-entries by the owner; 1 after a plain acquire
  std::chrono::milliseconds ttl_left{0};
};

// One page of Client::list. Pass next_after back as `after` to get the next page; it is
// empty on the last page.
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
