#include "backends/sqlite/errors.hpp"

#include <cstring>

#include "dlock/errors.hpp"

namespace dlock::backends::sqlite {

void throw_sqlite_error(sqlite3* db, int rc, const std::string& path, std::string_view key) {
  std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      // "unable to open database file" alone does not say why.
      if (const int err = db ? sqlite3_system_errno(db) : 0; err != 0) message += std::string(" (") + std::strerror(err) + ")";
      throw ConfigurationError("cannot use " + path + " as the lock database: " + message + " (" + kFix + ")", kName);
    case SQLITE_NOTADB:
      throw ConfigurationError(path + " is not a SQLite database (" + message +
                                   "); point the URL at a new file: sqlite:///path/to/locks.db",
                               kName);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      throw BackendError("the lock database " + path + " stayed busy past busy_timeout: " + message, kName,
                         std::string(key), true);
    default:
      throw BackendError("SQLite failed on " + path + ": " + message, kName, std::string(key));
  }
}

void path_error(const std::string& what, const std::string& path, int err) {
  throw ConfigurationError(what + " " + path + " for the lock database: " + std::strerror(err) + " (" + kFix + ")",
                           kName);
}

}  // namespace dlock::backends::sqlite
