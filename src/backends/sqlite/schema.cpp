#include "backends/sqlite/schema.hpp"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "backends/sqlite/errors.hpp"
#include "backends/sqlite/host.hpp"
#include "backends/sqlite/statements.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::sqlite {

using namespace statements;

namespace {

struct Stamp {
  long long version = 0;  // 0: a new file
  std::string boot_id;
};

Stamp read_stamp(Connection& connection) {
  Stamp stamp;
  // Asked of sqlite_schema itself: a connection's cached schema can predate tables that
  // another process has just created (sqlite3_table_column_metadata trusts that cache).
  bool exists = false;
  {
    Query query(connection, "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'dlock_meta')");
    query.one_row([&] { exists = query.int64(0) != 0; });
  }
  if (!exists) return stamp;
  Query query(connection,
              "SELECT (SELECT v FROM dlock_meta WHERE k = 'schema_version'), "
              "(SELECT v FROM dlock_meta WHERE k = 'boot_id')");
  query.one_row([&] {
    stamp.version = query.int64(0);
    stamp.boot_id = query.text(1);
  });
  return stamp;
}

// Creates the schema, checks its version and expires the leases of an earlier boot, all in
// one IMMEDIATE transaction so concurrent first opens serialize.
void set_up(Connection& connection) {
  {
    Query wal(connection, "PRAGMA journal_mode = WAL");
    std::string mode;
    wal.one_row([&] { mode = wal.text(0); });
    if (mode != "wal") {
      throw ConfigurationError("cannot switch " + connection.path() + " to WAL mode (got '" + mode +
                                   "'); keep the database on a local file system",
                               kName);
    }
  }
  const std::string boot_id = read_boot_id();
  const Stamp seen = read_stamp(connection);
  if (seen.version == kSchemaVersion && seen.boot_id == boot_id) return;  // the common case: one read
  connection.exec("BEGIN IMMEDIATE");
  const Stamp stamp = read_stamp(connection);  // again, now that no one else can change it
  if (stamp.version > kSchemaVersion) {
    throw ConfigurationError(connection.path() + " has dlock schema version " + std::to_string(stamp.version) +
                                 ", this build knows versions up to " + std::to_string(kSchemaVersion) +
                                 " (use a newer dlock, or a new file)",
                             kName);
  }
  if (stamp.version != 0 && stamp.version < 3) connection.exec(kReadersUntilColumn);
  connection.exec(kSchema);
  connection.exec(kEvictionsSchema);
  connection.exec(kSharedSchema);
  const std::string& stored = stamp.boot_id;
  if (stored != boot_id) {
    // CLOCK_BOOTTIME restarted, and every holder died with the old boot, as did every watcher.
    connection.exec(
        "UPDATE dlock_locks SET owner = '', hold_count = 0, expires_at = 0, readers_until = 0 "
        "WHERE owner <> '' OR readers_until <> 0");
    connection.exec("DELETE FROM dlock_evictions");
    connection.exec("DELETE FROM dlock_shared");  // their expiry times count from the old boot
    connection.exec("DELETE FROM dlock_modes");
    // A power loss may have dropped the last commits (synchronous=NORMAL), and with them
    // tokens already handed out: jump far past anything the old boot could have issued.
    if (!stored.empty()) {
      connection.exec("UPDATE dlock_locks SET token = token + 4294967296");
      connection.exec("UPDATE dlock_seq SET v = v + 4294967296 WHERE id = 0");
    }
    Query store(connection, "INSERT OR REPLACE INTO dlock_meta VALUES ('boot_id', ?1)");
    store.bind(1, boot_id);
    store.one_row([] {});
  }
  connection.exec("COMMIT");
}

}  // namespace

void set_up_schema(Connection& connection) {
  const auto give_up = std::chrono::steady_clock::now() + connection.busy_timeout();
  for (int attempt = 0;; ++attempt) {
    try {
      set_up(connection);
      return;
    } catch (const BackendError& e) {
      if (!sqlite3_get_autocommit(connection.db())) sqlite3_exec(connection.db(), "ROLLBACK", nullptr, nullptr, nullptr);
      if (!e.retryable() || std::chrono::steady_clock::now() >= give_up) throw;
      ::usleep(static_cast<useconds_t>(100 << std::min(attempt, 6)));
    }
  }
}

}  // namespace dlock::backends::sqlite
