#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "dlock/types.hpp"

namespace dlock {

inline constexpr std::chrono::milliseconds kDefaultTtl{30'000};

// How a client is opened (Client::open). Every field is optional.
struct ClientOptions {
  // Names the client in its default owners, which read NAME@HOST:PID.THREAD/RANDOM, e.g.
  // "report@web-3:15021.1/9f86d081884c7d65", so that a person reading `dlock status`, `dlock
  // list` or the admin page can tell who holds a key: NAME is this, HOST this host's name, PID
  // the process, THREAD a serial per thread (each thread is its own owner) and RANDOM 64 random
  // bits per client, so owners never collide even between containers with equal host names and
  // pids. Default: the program's name. Bytes that are not printable ASCII, spaces and '@'
  // become '_'; a long name or host is cut to fit the 128-byte owner limit.
  std::string name;

  // The lease of a lock taken without LockOptions::ttl. Default: the DLOCK_TTL environment
  // variable when set (a duration, as parse_duration reads it: "30s", "2m"), else kDefaultTtl.
  // Such a lock still renews in the background unless told otherwise.
  std::optional<std::chrono::milliseconds> default_ttl;
};

// How one lock is taken. Every field is optional; the defaults suit a service protecting a
// critical section of unknown length.
struct LockOptions {
  // Lease length, judged by the backend's clock. Default: the client's default TTL
  // (ClientOptions::default_ttl, DLOCK_TTL, else kDefaultTtl: 30 s). Must be > 0.
  // A short TTL frees the lock sooner after a crash; a long one tolerates longer pauses.
  std::optional<std::chrono::milliseconds> ttl;

  // Renew the lease in the background at about ttl/3 while it is held. Default: on when no
  // ttl was given, off when one was (an explicit TTL means "this long at most").
  std::optional<bool> auto_renew;

  // Who holds the lock. Default: the client's default owner for the calling thread
  // (NAME@HOST:PID.THREAD/RANDOM, see ClientOptions::name), so each thread is its own owner
  // and re-entry works per thread. An explicit owner (1..128
  // printable ASCII bytes) lets several processes or commands act as one owner, as scripts
  // using `dlock acquire --owner` do. Never use an address or host name: they are not unique.
  std::optional<std::string> owner;

  // Subtracted from every lease when computing Lease::valid_until(), to cover the request's
  // flight time and clock-rate drift. Default 2 ms + 1% of the TTL.
  std::optional<std::chrono::milliseconds> safety_margin;

  // LockMode::shared takes a shared hold: a read lock, or with `permits` a semaphore's permit
  // (dlock/shared_lock.hpp). Needs a store that keeps several holders per key
  // (Capabilities::shared_holders); others throw ConfigurationError.
  LockMode mode = LockMode::exclusive;
  // Shared holds only: the most holders the key admits at once (a semaphore's permits). 0, the
  // default, admits any number (readers). Every client of one key must agree while it is held.
  std::uint32_t permits = 0;
};

}  // namespace dlock
