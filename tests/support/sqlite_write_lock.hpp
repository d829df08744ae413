#pragma once

// A paused sqlite:// store for fault tests: holds SQLite's write lock on a dlock database, as a
// stuck writer of another process would, so every write of dlock (acquire, renew, release)
// waits for it and fails after its busy_timeout. Readers are not blocked (WAL).

#include <chrono>
#include <string>

struct sqlite3;

namespace dlock::test {

class SqliteWriteLock {
 public:
  // Opens `path` (an existing dlock database) and takes the write lock (BEGIN EXCLUSIVE, which
  // in WAL mode blocks writers only), waiting up to 10 s for a write in progress. Throws
  // std::runtime_error.
  explicit SqliteWriteLock(const std::string& path);
  // Commits (nothing was written) if still held.
  ~SqliteWriteLock();
  SqliteWriteLock(const SqliteWriteLock&) = delete;
  SqliteWriteLock& operator=(const SqliteWriteLock&) = delete;

  // When `key`'s lease ends by the store's clock (CLOCK_BOOTTIME, as dlock_now_us()), as a
  // duration since boot; throws if the key has no row.
  std::chrono::microseconds expires_at(const std::string& key) const;
  // Lets the writers in.
  void release();

 private:
  void exec(const char* sql) const;

  sqlite3* db_ = nullptr;
  bool held_ = false;
};

// CLOCK_BOOTTIME now: the sqlite:// store's clock.
std::chrono::microseconds boot_time();

}  // namespace dlock::test
