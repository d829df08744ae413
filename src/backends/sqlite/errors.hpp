#pragma once

// How sqlite:// reports a database it cannot use: the errors name the file and the fix.

#include <sqlite3.h>

#include <string>
#include <string_view>

namespace dlock::backends::sqlite {

inline constexpr const char* kName = "sqlite";
inline constexpr const char* kFix = "choose a writable directory: sqlite:///path/to/locks.db";

// Throws the dlock error for SQLite's result code `rc` on the database at `path`:
// ConfigurationError when the file cannot be opened, written or read as a database (naming the
// fix), a retryable BackendError when it stayed busy past busy_timeout, BackendError otherwise.
// `db` may be null (the handle could not be allocated).
[[noreturn]] void throw_sqlite_error(sqlite3* db, int rc, const std::string& path, std::string_view key = {});

// Throws ConfigurationError "<what> <path> for the lock database: <strerror(err)> (<fix>)".
[[noreturn]] void path_error(const std::string& what, const std::string& path, int err);

}  // namespace dlock::backends::sqlite
