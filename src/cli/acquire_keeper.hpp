#pragma once

// `dlock acquire` on a store whose locks end with the process (or connection) that took them
// but that other processes see: mysql:// session mode (the lock is a connection's GET_LOCK) and
// zookeeper:// (an ephemeral node of the client's session). `dlock acquire` itself exits at
// once, so a keeper process it forks takes the lock and holds it, detached, until the first
// of: the lock's TTL passes (it releases its hold), the lock is gone (`dlock release` of the
// last hold, a force-release, its session ended), or SIGTERM (it releases its hold). A
// force-release with a lock delay keeps the key closed until the TTL or `dlock release`, as on
// every store. It tells `dlock acquire` through a pipe what to print, so the output and exit
// codes are those of every other store.

#include <chrono>
#include <string>

#include "cli/commands.hpp"

namespace dlock::cli {

struct AcquireOptions {
  std::string key;
  std::string owner;
  std::chrono::milliseconds ttl = kDefaultTtl;
  WaitOptions wait;
  int conflict_exit = kExitConflict;
  bool quiet = false;
};

// What `dlock acquire` prints on stdout and stderr, and its exit code.
struct AcquireReport {
  int exit_code = kExitOk;
  std::string out;
  std::string err;
};

// The report of an attempt: the token (with --json, the lease as JSON), or the holder and the
// conflict exit code.
AcquireReport report_attempt(const GlobalOptions& global, const AcquireOptions& options, Attempt& attempt);
// Prints the report; returns its exit code.
int print_report(const AcquireReport& report);

// Takes the lock in a keeper process (above) and reports as `dlock acquire` does. Call it with
// no Client open: it forks, and refuses to (exit 69) while any thread but the caller runs.
int acquire_in_keeper(const GlobalOptions& global, const AcquireOptions& options);

}  // namespace dlock::cli
