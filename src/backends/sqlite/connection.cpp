#include "backends/sqlite/connection.hpp"

#include <unistd.h>

#include <algorithm>
#include <mutex>

#include "backends/sqlite/errors.hpp"
#include "backends/sqlite/host.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::sqlite {
namespace {

void now_us(sqlite3_context* context, int, sqlite3_value**) { sqlite3_result_int64(context, boot_time_us()); }

// By default every SQLite page cache starts by carving out 20 page slots and touching each
// one; the lock file has a handful of pages, and a short-lived `dlock run` pays for every
// page fault. SQLite accepts this only before it initializes, so it applies when dlock is the
// first user of SQLite in the process and changes nothing otherwise.
void skip_page_cache_preallocation() {
  static std::once_flag once;
  std::call_once(once, [] { sqlite3_config(SQLITE_CONFIG_PAGECACHE, nullptr, 0, 0); });
}

}  // namespace

Connection::Connection(const std::string& path, int busy_ms, std::span<const char* const> statements)
    : path_(path), sql_(statements), statements_(statements.size()) {
  skip_page_cache_preallocation();
  const int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 nullptr);
  try {
    if (rc != SQLITE_OK) fail(rc);
    // A file we may not write opens read-only without an error; say so now.
    if (sqlite3_db_readonly(db_, "main") == 1) {
      throw ConfigurationError("cannot use " + path_ + " as the lock database: this user may not write it (" +
                                   kFix + ")",
                               kName);
    }
    sqlite3_extended_result_codes(db_, 1);
    busy_.timeout = std::chrono::milliseconds(busy_ms);
    sqlite3_busy_handler(db_, &Connection::on_busy, &busy_);
    // One host: a power loss that drops the last commits also killed every holder, so a
    // commit need not fsync (WAL checkpoints still do).
    //
    // Every process that opens the file first rebuilds the WAL index by reading the whole
    // WAL, and a checkpoint on close costs three fsyncs: both would dominate a short-lived
    // `dlock run`. So no checkpoint on close, and a small automatic checkpoint threshold
    // keeps the WAL (and that rebuild) short; its file is capped at 1 MiB.
    if (const int config = sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr); config != SQLITE_OK) {
      fail(config);
    }
    exec("PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 32; PRAGMA journal_size_limit = 1048576");
    const int fn = sqlite3_create_function_v2(db_, "dlock_now_us", 0, SQLITE_UTF8, nullptr, now_us, nullptr,
                                              nullptr, nullptr);
    if (fn != SQLITE_OK) fail(fn);
  } catch (...) {
    sqlite3_close_v2(db_);  // sqlite3_open_v2 allocates a handle even when it fails
    throw;
  }
}

Connection::~Connection() {
  for (sqlite3_stmt* statement : statements_) sqlite3_finalize(statement);
  sqlite3_close_v2(db_);  // rolls back an open transaction
}

void Connection::fail(int rc, std::string_view key) const { throw_sqlite_error(db_, rc, path_, key); }

void Connection::exec(const char* sql) {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) fail(rc);
}

sqlite3_stmt* Connection::prepare(const char* sql, unsigned flags) {
  sqlite3_stmt* statement = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql, -1, flags, &statement, nullptr);
  if (rc != SQLITE_OK) fail(rc);
  return statement;
}

sqlite3_stmt* Connection::cached(std::size_t which) {
  sqlite3_stmt*& statement = statements_[which];
  if (!statement) statement = prepare(sql_[which], SQLITE_PREPARE_PERSISTENT);
  return statement;
}

// SQLite's own busy handler sleeps at least 1 ms, several times a lock's whole critical
// section; write transactions here last microseconds, so back off from 20 µs instead.
int Connection::on_busy(void* context, int count) {
  auto& busy = *static_cast<Busy*>(context);
  const auto now = std::chrono::steady_clock::now();
  if (count == 0) busy.since = now;
  if (now - busy.since >= busy.timeout) return 0;
  const auto pause = std::chrono::microseconds(20 << std::min(count, 6));  // up to 1.28 ms
  ::usleep(static_cast<useconds_t>(pause.count()));
  return 1;
}

Query::~Query() {
  if (owned_) {
    sqlite3_finalize(statement_);
  } else {
    sqlite3_reset(statement_);
    sqlite3_clear_bindings(statement_);
  }
}

Query& Query::bind(int index, std::string_view text) {
  // A null data pointer would bind SQL NULL, not ''.
  check(sqlite3_bind_text(statement_, index, text.empty() ? "" : text.data(), static_cast<int>(text.size()),
                          SQLITE_STATIC));
  return *this;
}

Query& Query::bind(int index, std::int64_t value) {
  check(sqlite3_bind_int64(statement_, index, value));
  return *this;
}

Query& Query::bind_empty_blob(int index) {
  check(sqlite3_bind_zeroblob(statement_, index, 0));
  return *this;
}

bool Query::step() {
  const int rc = sqlite3_step(statement_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  connection_.fail(rc, key_);
}

void Query::run() {
  while (step()) {
  }
}

std::string Query::text(int column) const { return std::string(view(column)); }

std::string_view Query::view(int column) const {
  const auto* text = sqlite3_column_text(statement_, column);
  if (!text) return {};
  return std::string_view(reinterpret_cast<const char*>(text),
                          static_cast<std::size_t>(sqlite3_column_bytes(statement_, column)));
}

void Query::check(int rc) const {
  if (rc != SQLITE_OK) connection_.fail(rc, key_);
}

}  // namespace dlock::backends::sqlite
