#include "support/sqlite_write_lock.hpp"

#include <sqlite3.h>
#include <time.h>

#include <stdexcept>

namespace dlock::test {

SqliteWriteLock::SqliteWriteLock(const std::string& path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    throw std::runtime_error("cannot open " + path + ": " + message);
  }
  sqlite3_busy_timeout(db_, 10'000);
  try {
    exec("BEGIN EXCLUSIVE");
  } catch (...) {
    sqlite3_close(db_);
    throw;
  }
  held_ = true;
}

SqliteWriteLock::~SqliteWriteLock() {
  if (held_) sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(db_);
}

void SqliteWriteLock::exec(const char* sql) const {
  if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
    throw std::runtime_error(std::string(sql) + " failed: " + sqlite3_errmsg(db_));
  }
}

std::chrono::microseconds SqliteWriteLock::expires_at(const std::string& key) const {
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT expires_at FROM dlock_locks WHERE name = ?1", -1, &statement,
                         nullptr) != SQLITE_OK) {
    throw std::runtime_error(std::string("cannot read dlock_locks: ") + sqlite3_errmsg(db_));
  }
  sqlite3_bind_text(statement, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  const bool found = sqlite3_step(statement) == SQLITE_ROW;
  const auto at = found ? sqlite3_column_int64(statement, 0) : 0;
  sqlite3_finalize(statement);
  if (!found) throw std::runtime_error("no row for '" + key + "' in dlock_locks");
  return std::chrono::microseconds(at);
}

void SqliteWriteLock::release() {
  if (!held_) return;
  exec("COMMIT");
  held_ = false;
}

std::chrono::microseconds boot_time() {
  timespec now{};
  ::clock_gettime(CLOCK_BOOTTIME, &now);
  return std::chrono::seconds(now.tv_sec) + std::chrono::microseconds(now.tv_nsec / 1000);
}

}  // namespace dlock::test
