#pragma once

// The SQLite layer of sqlite://: one sqlite3 handle on the lock database with its cached
// statements, and one execution of a statement. Nothing here knows the schema or the locks:
// the backend hands a connection its statements. A Connection, and the Queries on it, are used
// by one thread at a time.

#include <sqlite3.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::backends::sqlite {

// One sqlite3 handle with its cached statements, used by one thread at a time.
class Connection {
 public:
  // Opens (creating) the database at `path`, which this user must be able to write, with SQL
  // function dlock_now_us() (boot_time_us()). Statement i of `statements` is prepared on its
  // first use and kept; the texts must outlive the connection. Throws ConfigurationError or
  // BackendError (throw_sqlite_error).
  Connection(const std::string& path, int busy_ms, std::span<const char* const> statements);
  ~Connection();

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  sqlite3* db() const noexcept { return db_; }
  const std::string& path() const noexcept { return path_; }
  std::chrono::milliseconds busy_timeout() const noexcept { return busy_.timeout; }

  [[noreturn]] void fail(int rc, std::string_view key = {}) const;

  void exec(const char* sql);
  sqlite3_stmt* prepare(const char* sql, unsigned flags);
  // Statement `which` of those given at open, prepared once.
  sqlite3_stmt* cached(std::size_t which);

 private:
  struct Busy {
    std::chrono::milliseconds timeout{0};
    std::chrono::steady_clock::time_point since;
  };

  static int on_busy(void* context, int count);

  std::string path_;
  sqlite3* db_ = nullptr;
  Busy busy_;
  std::span<const char* const> sql_;
  std::vector<sqlite3_stmt*> statements_;
};

// One execution of a statement: binds, steps, and resets it when done.
class Query {
 public:
  // Statement `which` of the connection's cached ones; errors name `key`.
  Query(Connection& connection, std::size_t which, std::string_view key = {})
      : connection_(connection), statement_(connection.cached(which)), key_(key) {}
  // A statement prepared for this execution only.
  Query(Connection& connection, const char* sql)
      : connection_(connection), statement_(connection.prepare(sql, 0)), owned_(true) {}

  ~Query();

  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  Query& bind(int index, std::string_view text);
  Query& bind(int index, std::int64_t value);
  // An empty BLOB, which sorts after every TEXT value.
  Query& bind_empty_blob(int index);

  // True when a row is ready; false when the statement is done (and, in autocommit mode,
  // committed).
  bool step();

  // Steps a statement that yields at most one row: `read` copies its columns, then the
  // statement runs to completion, which commits in autocommit mode. False when no row.
  template <class Read>
  bool one_row(Read&& read) {
    if (!step()) return false;
    read();
    run();
    return true;
  }

  // Runs the statement to completion, ignoring any rows.
  void run();

  std::int64_t int64(int column) const { return sqlite3_column_int64(statement_, column); }
  std::string text(int column) const;
  // The column's text without a copy, valid until the next step() or the end of the query.
  std::string_view view(int column) const;

 private:
  void check(int rc) const;

  Connection& connection_;
  sqlite3_stmt* statement_;
  std::string_view key_;
  bool owned_ = false;
};

}  // namespace dlock::backends::sqlite
