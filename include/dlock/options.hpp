#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace dlock {

inline constexpr std::chrono::milliseconds kDefaultTtl{30'000};

// How one lock is taken. Every field is optional; the defaults suit a service protecting a
// critical section of unknown length.
struct LockOptions {
  // Lease length, judged by the backend's clock. Default kDefaultTtl (30 s). Must be > 0.
  // A short TTL frees the lock sooner after a crash; a long one tolerates longer pauses.
  std::optional<std::chrono::milliseconds> ttl;

  // Renew the lease in the background at about ttl/3 while it is held. Default: on when no
  // ttl was given, off when one was (an explicit TTL means "this long at most").
  std::optional<bool> auto_renew;

  // Who holds the lock. Default: this client's random 128-bit id plus the calling thread,
  // so each thread is its own owner and re-entry works per thread. An explicit owner (1..128
  // printable ASCII bytes) lets several processes or commands act as one owner, as scripts
  // using `dlock acquire --owner` do. Never use an address or host name: they are not unique.
  std::optional<std::string> owner;

  // Subtracted from every lease when computing Lease::valid_until(), to cover the request's
  // flight time and clock-rate drift. Default 2 ms + 1% of the TTL.
  std::optional<std::chrono::milliseconds> safety_margin;
};

}  // namespace dlock
