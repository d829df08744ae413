#include "backends/postgres/common.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "dlock/errors.hpp"

namespace dlock::backends::postgres {

bool valid_table(std::string_view name) {
  return !name.empty() && name.size() <= 50 && !std::isdigit(static_cast<unsigned char>(name.front())) &&
         std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

std::uint64_t to_u64(const std::optional<std::string>& text) { return text ? std::stoull(*text) : 0; }

std::chrono::milliseconds to_ms(const std::optional<std::string>& text) {
  return std::chrono::milliseconds(text ? std::max(0LL, std::stoll(*text)) : 0);
}

namespace {

bool mentions(const std::string& message, std::string_view text) { return message.find(text) != std::string::npos; }

}  // namespace

void raise(const PgError& e, const Settings& settings, std::string_view key) {
  const auto& c = settings.connect;
  const std::string& url = c.redacted_url;
  const std::string detail = " (PostgreSQL" + (e.sqlstate.empty() ? "" : " error " + e.sqlstate) + ": " + e.message + ")";
  // Connecting: libpq reports these as text only.
  if (e.sqlstate == "28P01" || mentions(e.message, "password authentication failed") ||
      mentions(e.message, "no password supplied")) {
    throw ConfigurationError("the PostgreSQL server refused user '" + c.user +
                                 "' with this password; check the user and password in " + url + detail,
                             kName);
  }
  if (e.sqlstate == "3D000" || (mentions(e.message, "database \"") && mentions(e.message, "does not exist"))) {
    throw ConfigurationError("database '" + c.database + "' does not exist on the server of " + url +
                                 "; create it (createdb) or fix the URL" + detail,
                             kName);
  }
  if (e.sqlstate == "28000" || mentions(e.message, "no pg_hba.conf entry")) {
    throw ConfigurationError("the PostgreSQL server of " + url + " does not admit user '" + c.user + "' to database '" +
                                 c.database + "' from this host (pg_hba.conf)" + detail,
                             kName);
  }
  if (e.sqlstate == kInsufficientPrivilege && mentions(e.message, "terminate")) {
    throw ConfigurationError("session mode frees a lock held by another connection by ending that connection, but user '" +
                                 c.user + "' may not end it (pg_terminate_backend); GRANT pg_signal_backend TO " +
                                 c.user + ", or run every client as one user" + detail,
                             kName);
  }
  if (e.sqlstate == kInsufficientPrivilege) {
    throw ConfigurationError("user '" + c.user + "' lacks a privilege on the lock table '" + settings.table +
                                 "'; GRANT SELECT, INSERT, UPDATE, DELETE on it and USAGE on " + settings.table +
                                 "_seq, or have its owner create them (dlock schema postgres prints the DDL)" + detail,
                             kName);
  }
  if (e.connection_broken) {
    if (e.maybe_applied) {
      throw OutcomeUnknownError("the connection to " + url + " broke before the answer came" + detail, std::string(key),
                                kName);
    }
    throw ConnectionError("cannot reach the PostgreSQL server of " + url + detail, kName, std::string(key));
  }
  // Transient server states: a retry may succeed.
  const bool retryable = e.sqlstate.starts_with("40") || e.sqlstate.starts_with("53") || e.sqlstate.starts_with("57") ||
                         e.sqlstate.starts_with("08");
  throw BackendError("PostgreSQL refused a statement of " + url + detail, kName, std::string(key), retryable);
}

LockInfo holder_of(const Row& row, std::string key, std::size_t first, bool shared_column) {
  LockInfo info;
  info.key = std::move(key);
  info.owner = row[first].value_or("");
  info.token = to_u64(row[first + 1]);
  info.hold_count = static_cast<std::uint32_t>(to_u64(row[first + 2]));
  info.ttl_left = to_ms(row[first + 3]);
  info.held_for = to_ms(row[first + 4]);
  info.evicted = info.hold_count == 0;
  if (shared_column && row[first + 5] == "t") info.mode = LockMode::shared;
  return info;
}

std::string list_most(std::size_t limit) { return std::to_string(std::min<std::size_t>(limit, INT64_MAX - 1) + 1); }

ListPage list_page(const std::vector<Row>& rows, std::size_t limit) {
  ListPage page;
  std::size_t keys = 0;
  for (const auto& row : rows) {
    const std::string key = row[0].value_or("");
    if (page.locks.empty() || page.locks.back().key != key) {
      if (keys == limit) {
        page.next_after = page.locks.back().key;
        break;
      }
      ++keys;
    }
    page.locks.push_back(holder_of(row, key, 1, true));
  }
  return page;
}

std::string ms_text(std::chrono::milliseconds ms) { return std::to_string(ms.count()); }

}  // namespace dlock::backends::postgres
