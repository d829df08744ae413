#pragma once

// What the parts of postgres:// share: its settings, and errors that name the fix.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/postgres/connection.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::postgres {

inline constexpr const char* kName = "postgres";

struct Settings {
  ConnectOptions connect;
  std::string mode = "lease";
  std::string table = "dlock_locks";
  bool create_table = true;
};

// A table name dlock accepts: 1 to 50 ASCII letters, digits or underscores, not starting with a
// digit (TABLE_activity fits PostgreSQL's 63 bytes). dlock quotes it, so case counts.
bool valid_table(std::string_view name);

// The modes.
std::shared_ptr<backend::Backend> make_lease_backend(Settings settings);
std::shared_ptr<backend::Backend> make_session_backend(Settings settings);

// SQLSTATEs dlock acts on.
inline constexpr std::string_view kUndefinedTable = "42P01";
inline constexpr std::string_view kUndefinedFunction = "42883";
inline constexpr std::string_view kInsufficientPrivilege = "42501";
inline constexpr std::string_view kUniqueViolation = "23505";
inline constexpr std::string_view kDuplicateTable = "42P07";
inline constexpr std::string_view kDuplicateObject = "42710";

// Throws the dlock error for `e`: ConfigurationError for what the setup must fix (a wrong
// password, a missing database, a missing privilege), OutcomeUnknownError when a statement's
// connection broke after it was sent, ConnectionError when the server cannot be reached,
// BackendError otherwise. Never prints the password.
[[noreturn]] void raise(const PgError& e, const Settings& settings, std::string_view key);

// `text` with every `from` replaced by `to` (the statements' placeholders).
std::string replace_all(std::string text, const std::string& from, const std::string& to);

// Text columns as numbers.
std::uint64_t to_u64(const std::optional<std::string>& text);
std::chrono::milliseconds to_ms(const std::optional<std::string>& text);
std::string ms_text(std::chrono::milliseconds ms);
// A holder as the statements report it: owner, token, holds, ttl left (ms), time held (ms) from
// column `first` on, then, when `shared_column`, whether it holds shared (t/f).
LockInfo holder_of(const Row& row, std::string key, std::size_t first, bool shared_column = false);

// list(): the `most` parameter of a list statement, one key more than `limit` asks for, which
// tells whether another page follows; and the page of its rows (the key, then a holder with
// its shared column), whole keys each with all its holders.
std::string list_most(std::size_t limit);
ListPage list_page(const std::vector<Row>& rows, std::size_t limit);

}  // namespace dlock::backends::postgres
