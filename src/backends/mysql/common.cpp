#include "backends/mysql/common.hpp"

#include <mysqld_error.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/stable_hash.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::mysql {

bool valid_identifier(const std::string& name, std::size_t max) {
  return !name.empty() && name.size() <= max && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::int64_t ttl_us(std::chrono::milliseconds ttl) {
  constexpr std::int64_t kMaxTtlUs = 100LL * 365 * 24 * 3'600'000'000;
  return std::clamp<std::int64_t>(ttl.count() * 1000, 0, kMaxTtlUs);
}

std::chrono::milliseconds ceil_ms(const std::optional<std::string>& us_text) {
  const long long us = us_text ? std::stoll(*us_text) : 0;
  return std::chrono::milliseconds(us <= 0 ? 0 : (us + 999) / 1000);
}

std::uint64_t to_u64(const std::optional<std::string>& text) { return text ? std::stoull(*text) : 0; }

namespace {

// What the server must do to pass the connection's ssl-mode, which it did not.
std::string tls_requirement(const ConnectOptions& c) {
  if (c.ssl_mode == "preferred") return "the TLS handshake it offered failed";
  std::string what = "it must offer TLS";
  if (c.ssl_mode == "verify-ca" || c.ssl_mode == "verify-identity") {
    what += ", with a certificate signed by a CA in ssl-ca=" + c.ssl_ca;
  }
  if (c.ssl_mode == "verify-identity") what += " and naming the host '" + c.host + "'";
  return what;
}

}  // namespace

void raise(const SqlError& e, const Settings& settings, std::string_view key) {
  const std::string& url = settings.connect.redacted_url;
  const std::string detail = " (MySQL error " + std::to_string(e.code) + ": " + e.message + ")";
  if (e.tls_refused) {
    throw ConfigurationError("the MySQL server of " + url + " does not meet ssl-mode=" + settings.connect.ssl_mode +
                                 ": " + tls_requirement(settings.connect) + detail,
                             kName);
  }
  switch (e.code) {
    case ER_ACCESS_DENIED_ERROR:
      throw ConfigurationError("the MySQL server refused user '" + settings.connect.user +
                                   "' with this password; check the user and password in " + url + detail,
                               kName);
    case ER_DBACCESS_DENIED_ERROR:
      throw ConfigurationError("user '" + settings.connect.user + "' may not use database '" +
                                   settings.connect.database + "'; GRANT it access, or fix " + url + detail,
                               kName);
    case ER_BAD_DB_ERROR:
      throw ConfigurationError("database '" + settings.connect.database + "' does not exist on the server of " + url +
                                   "; create it or fix the URL" + detail,
                               kName);
    case ER_RECORD_FILE_FULL:
      if (settings.mode != "session") break;
      throw ConfigurationError("table '" + settings.table + "_session' is full even without its released rows" + detail +
                                   ": session mode keeps a row per held key in a memory table, whose size "
                                   "max_heap_table_size fixed when it was made; while no lock is held, drop `" +
                                   settings.table + "_session` and `" + settings.table +
                                   "_epoch` and make them anew with a larger max_heap_table_size "
                                   "(dlock schema mysql prints the DDL)",
                               kName);
    case ER_TABLEACCESS_DENIED_ERROR:
    case ER_COLUMNACCESS_DENIED_ERROR:
    case ER_SPECIFIC_ACCESS_DENIED_ERROR:
      throw ConfigurationError("user '" + settings.connect.user + "' lacks a privilege on table '" + settings.table +
                                   "': dlock needs SELECT, INSERT, UPDATE and DELETE on it" + detail,
                               kName);
    default:
      break;
  }
  if (e.connection_broken) {
    if (e.maybe_applied) {
      throw OutcomeUnknownError("the connection to " + url + " broke before the answer came" + detail,
                                std::string(key), kName);
    }
    throw ConnectionError("cannot reach the MySQL server of " + url + detail, kName, std::string(key));
  }
  throw BackendError("MySQL failed on " + url + detail, kName, std::string(key), ModeBackend::retryable(e));
}

bool ModeBackend::retryable(const SqlError& e) { return e.code == ER_LOCK_DEADLOCK || e.code == ER_LOCK_WAIT_TIMEOUT; }

std::string ModeBackend::bell_name(std::string_view key) const {
  char hex[17];
  const std::string scope = settings_.connect.database + "." + settings_.table + ":";
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(core::stable_hash(scope + std::string(key))));
  return std::string("dlock:") + hex;
}

std::unique_ptr<backend::Waiter> ModeBackend::waiter(const backend::AcquireRequest& request) {
  return std::make_unique<DoorbellChannel>(*this, request);
}

void ModeBackend::add(const Activity& delta) {
  const std::string t = "`" + settings_.table + "_activity`";
  auto connection = take();
  with_retries({}, [&] {
    return connection->execute(
        "INSERT INTO " + t + " VALUES (0, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE"
        " acquisitions = acquisitions + VALUES(acquisitions), conflicts = conflicts + VALUES(conflicts),"
        " waits = waits + VALUES(waits), wait_us = wait_us + VALUES(wait_us),"
        " renewals = renewals + VALUES(renewals), losses = losses + VALUES(losses)",
        {static_cast<std::int64_t>(delta.acquisitions), static_cast<std::int64_t>(delta.conflicts),
         static_cast<std::int64_t>(delta.waits), static_cast<std::int64_t>(delta.wait_us),
         static_cast<std::int64_t>(delta.renewals), static_cast<std::int64_t>(delta.losses)});
  });
}

Activity ModeBackend::totals() {
  auto connection = take();
  const auto rows = with_retries({}, [&] {
    return connection->query("SELECT acquisitions, conflicts, waits, wait_us, renewals, losses FROM `" +
                                 settings_.table + "_activity` WHERE id = 0",
                             {});
  });
  if (rows.empty()) return Activity{};
  const Row& row = rows[0];
  return Activity{to_u64(row[0]), to_u64(row[1]), to_u64(row[2]), to_u64(row[3]), to_u64(row[4]), to_u64(row[5])};
}

void ModeBackend::ping() {
  auto connection = take();
  with_retries({}, [&] { return connection->query("SELECT 1", {}); });
}

Pool::Lease ModeBackend::take() {
  try {
    return pool_.take();
  } catch (const SqlError& e) {
    raise(e, settings_);
  }
}

Pool::Lease ModeBackend::take_unpinned() {
  try {
    return pool_.take_unpinned();
  } catch (const SqlError& e) {
    raise(e, settings_);
  }
}

Pool::Lease ModeBackend::take_for(std::string_view key, std::string_view owner, std::optional<std::uint64_t> token) {
  const auto serial = remembered(key, owner, token);
  if (!serial) return take();
  try {
    return pool_.take(*serial);
  } catch (const SqlError& e) {
    raise(e, settings_, key);
  }
}

ModeBackend::Attempt ModeBackend::attempt_for(const backend::AcquireRequest& request, DoorbellChannel* channel,
                                              bool unpinned) {
  Attempt attempt;
  attempt.channel = channel;
  if (attempt.channel) {
    attempt.connection = &attempt.channel->connection();
    return attempt;
  }
  const bool known = remembered(request.key, request.owner).has_value();
  attempt.own.emplace(known || !unpinned ? take_for(request.key, request.owner) : take_unpinned());
  attempt.connection = &**attempt.own;
  return attempt;
}

void ModeBackend::remember(std::string_view key, std::string_view owner, std::uint64_t connection_serial,
                           std::uint64_t token, LockMode mode) {
  {
    // Pinned before the connection goes back to the pool: a take_unpinned() in between
    // would hand out a connection that holds this lock (GET_LOCK is re-entrant per session).
    std::lock_guard lock(sessions_mutex_);
    auto [it, added] =
        sessions_.try_emplace({std::string(key), std::string(owner)}, Remembered{connection_serial, token, mode});
    if (added || it->second.serial != connection_serial) {
      pool_.pin(connection_serial);
      if (!added) pool_.unpin(it->second.serial);
    }
    it->second = Remembered{connection_serial, token, mode};
  }
  if (watching_connections_) pool_.watch(connection_serial);
}

std::optional<std::uint64_t> ModeBackend::remembered(std::string_view key, std::string_view owner,
                                                     std::optional<std::uint64_t> token) {
  std::lock_guard lock(sessions_mutex_);
  const auto it = sessions_.find({std::string(key), std::string(owner)});
  if (it == sessions_.end() || (token && it->second.token != *token)) return std::nullopt;
  return it->second.serial;
}

bool ModeBackend::remembered_shared(std::string_view key, std::string_view owner, std::uint64_t token) {
  std::lock_guard lock(sessions_mutex_);
  const auto it = sessions_.find({std::string(key), std::string(owner)});
  return it != sessions_.end() && it->second.token == token && it->second.mode == LockMode::shared;
}

void ModeBackend::forget(std::string_view key, std::string_view owner, std::uint64_t token) {
  std::lock_guard lock(sessions_mutex_);
  const auto it = sessions_.find({std::string(key), std::string(owner)});
  if (it == sessions_.end() || it->second.token != token) return;
  const std::uint64_t serial = it->second.serial;
  sessions_.erase(it);
  pool_.unpin(serial);
  if (!watching_connections_) return;
  const bool still_used = std::any_of(sessions_.begin(), sessions_.end(), [&](const auto& s) { return s.second.serial == serial; });
  if (!still_used) pool_.unwatch(serial);
}

bool ModeBackend::watch(std::shared_ptr<backend::Events> events) {
  std::lock_guard lock(sessions_mutex_);
  events_ = std::move(events);
  return false;
}

void ModeBackend::watch_lock_connections() {
  watching_connections_ = true;
  pool_.on_closed([this](std::uint64_t serial) { connection_closed(serial); });
}

void ModeBackend::connection_closed(std::uint64_t serial) {
  std::vector<std::pair<std::pair<std::string, std::string>, std::uint64_t>> lost;  // (key, owner), token
  std::shared_ptr<backend::Events> events;
  {
    std::lock_guard lock(sessions_mutex_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second.serial != serial) {
        ++it;
        continue;
      }
      lost.emplace_back(it->first, it->second.token);
      it = sessions_.erase(it);
      pool_.unpin(serial);
    }
    events = events_;
  }
  if (!events) return;
  for (const auto& [held, token] : lost) {
    events->lost({held.first, held.second, token},
                 "its MySQL connection ended (killed, the server restarted or the network dropped it), and the "
                 "server freed its session lock with it");
  }
}

bool ModeBackend::keeps_doorbell(std::string_view key, const Connection& connection) {
  std::lock_guard lock(sessions_mutex_);
  for (auto it = sessions_.lower_bound({std::string(key), std::string()}); it != sessions_.end() && it->first.first == key;
       ++it) {
    if (it->second.serial == connection.serial() && it->second.mode == LockMode::exclusive) return true;
  }
  return false;
}

ListPage ModeBackend::list_page(std::string_view prefix, std::string_view after, std::size_t limit,
                               const std::string& bounded_sql, const std::string& open_sql,
                               const std::function<bool(Connection&, const Row&)>& keep,
                               std::size_t shared_column) {
  if (limit == 0) return {};
  std::string prefix_end(prefix);
  while (!prefix_end.empty() && static_cast<unsigned char>(prefix_end.back()) == 0xff) prefix_end.pop_back();
  if (!prefix_end.empty()) prefix_end.back() = static_cast<char>(static_cast<unsigned char>(prefix_end.back()) + 1);
  const auto from = std::max(prefix, after);
  const auto fetch = static_cast<std::int64_t>(std::min<std::size_t>(limit, 100'000) + 1);
  auto connection = take();
  auto rows = with_retries(prefix, [&] {
    auto found = prefix_end.empty() ? connection->query(open_sql, {from, after, fetch})
                                    : connection->query(bounded_sql, {from, std::string_view(prefix_end), after, fetch});
    if (keep) std::erase_if(found, [&](const Row& row) { return !keep(*connection, row); });
    return found;
  });
  ListPage page;
  std::size_t keys = 0;
  for (const Row& row : rows) {
    std::string key = row[0].value_or("");
    if (page.locks.empty() || page.locks.back().key != key) {
      if (keys == limit) {
        page.next_after = page.locks.back().key;
        break;
      }
      ++keys;
    }
    LockInfo holder = info(std::move(key), row, 1);
    if (shared_column != 0 && row[shared_column] == std::optional<std::string>("1")) holder.mode = LockMode::shared;
    page.locks.push_back(std::move(holder));
  }
  return page;
}

std::vector<LockInfo> ModeBackend::inspect_on(Connection& connection, std::string_view key,
                                              const std::string& inspect_sql, const std::string& bell) {
  const auto rows = with_retries(key, [&] {
    return bell.empty() ? connection.query(inspect_sql, {key}) : connection.query(inspect_sql, {key, bell});
  });
  std::vector<LockInfo> holders;
  for (const Row& row : rows) holders.push_back(info(std::string(key), row, 0));
  return holders;
}

std::vector<LockInfo> ModeBackend::evict(
    std::string_view key, std::optional<std::uint64_t> token, const std::string& inspect_sql,
    const std::string& force_sql, const std::string& bell,
    const std::function<void(Connection&, std::int64_t held_token)>& on_freed) {
  auto connection = take();
  for (int attempt = 0; attempt < 100; ++attempt) {
    const auto holders = inspect_on(*connection, key, inspect_sql, bell);
    if (holders.empty() || (token && holders.front().token != *token)) return {};
    const LockInfo& held = holders.front();
    const auto held_token = static_cast<std::int64_t>(held.token);
    const auto outcome = with_retries(key, [&] {
      return bell.empty() ? connection->execute(force_sql, {key, held.owner, held_token})
                          : connection->execute(force_sql, {key, held.owner, held_token, bell});
    });
    if (outcome.affected == 1) {
      if (on_freed) on_freed(*connection, held_token);
      return {held};
    }
    // It changed hands meanwhile: look again.
  }
  throw BackendError("'" + std::string(key) + "' kept changing hands during force-release", kName, std::string(key),
                     true);
}

LockInfo ModeBackend::info(std::string key, const Row& row, std::size_t first) {
  LockInfo lock{std::move(key), row[first].value_or(""), to_u64(row[first + 1]),
                static_cast<std::uint32_t>(to_u64(row[first + 2])), ceil_ms(row[first + 3])};
  if (const auto& held_us = row[first + 4]) {
    lock.held_for = std::chrono::milliseconds(std::max<std::int64_t>(std::stoll(*held_us), 0) / 1000);
  }
  lock.evicted = !lock.owner.empty() && lock.hold_count == 0;
  return lock;
}

void ModeBackend::ensure_lock_table(Connection& connection, bool session_tables) {
  const std::string& table = settings_.table;
  std::string e_missing;  // the server's words for the table it did not find
  try {
    // The token floor is the last thing the DDL makes: a concurrent first user may have
    // created only the tables so far. The empty joins name the columns and tables later
    // versions added, in the same round trip.
    const std::string memory = !session_tables ? ""
                                               : " LEFT JOIN (SELECT name, readers_until FROM `" + table +
                                                     "_session` LIMIT 0) AS memory ON TRUE LEFT JOIN (SELECT name FROM `" + table +
                                                     "_holders` LIMIT 0) AS holders ON TRUE LEFT JOIN (SELECT id FROM `" +
                                                     table + "_epoch` LIMIT 0) AS epoch ON TRUE";
    if (!connection
             .query("SELECT s.v FROM `" + table + "_seq` AS s LEFT JOIN (SELECT session_id, heir_owner, heir_ttl_us,"
                    " heir_session, readers_until FROM `" + table + "` LIMIT 0) AS added ON TRUE LEFT JOIN (SELECT id FROM `" + table +
                    "_activity` LIMIT 0) AS activity ON TRUE LEFT JOIN (SELECT name FROM `" + table +
                    "_shared` LIMIT 0) AS shared ON TRUE LEFT JOIN (SELECT name FROM `" + table +
                    "_claim` LIMIT 0) AS claim ON TRUE" + memory + " WHERE s.id = 0",
                    {})
             .empty()) {
      return;
    }
  } catch (const SqlError& e) {
    if (e.code == ER_BAD_FIELD_ERROR) {
      throw ConfigurationError(
          "table '" + table + "' was made by an earlier dlock and lacks columns (" + e.message +
              "): add them with ALTER TABLE `" + table +
              "` ADD COLUMN session_id BIGINT UNSIGNED NOT NULL DEFAULT 0, ADD COLUMN heir_owner VARBINARY(128) NOT NULL"
              " DEFAULT '', ADD COLUMN heir_ttl_us BIGINT UNSIGNED NOT NULL DEFAULT 0, ADD COLUMN heir_session BIGINT"
              " UNSIGNED NOT NULL DEFAULT 0, ADD COLUMN readers_until DATETIME(6) NOT NULL DEFAULT '1000-01-01'"
              " (leaving out any it has), or, while no lock is held, drop it and `" + table +
              "_seq` to have both made anew; session mode's `" + table + "_session` lacks one when the message names"
              " readers_until: ALTER TABLE `" + table + "_session` ADD COLUMN readers_until DATETIME(6) NOT NULL"
              " DEFAULT '1000-01-01'",
          kName);
    }
    if (e.code != ER_NO_SUCH_TABLE) raise(e, settings_);
    e_missing = e.message;
  }
  const std::string fix = "create it with the DDL of `dlock schema mysql --table " + table + "`";
  if (!settings_.create_table) {
    throw ConfigurationError("the lock tables of '" + table + "' are missing in database '" +
                                 settings_.connect.database + "' (" + e_missing + ") and create_table=false: " + fix,
                             kName);
  }
  const std::string ddl = lock_table_schema(table);
  try {
    std::size_t start = 0;
    while (start < ddl.size()) {  // one statement at a time
      const std::size_t end = ddl.find(";\n", start);
      const std::string statement = ddl.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (statement.find_first_not_of(" \n") != std::string::npos) connection.run(statement);
      if (end == std::string::npos) break;
      start = end + 2;
    }
  } catch (const SqlError& e) {
    if (e.code == ER_TABLEACCESS_DENIED_ERROR || e.code == ER_DBACCESS_DENIED_ERROR ||
        e.code == ER_SPECIFIC_ACCESS_DENIED_ERROR) {
      // Missing altogether, or made by an earlier dlock that had fewer tables.
      throw ConfigurationError("the lock tables of '" + table + "' are not all there (" + e_missing + ") and user '" +
                                   settings_.connect.user + "' may not create them (MySQL error " +
                                   std::to_string(e.code) + ": " + e.message + "); have someone " + fix,
                               kName);
    }
    raise(e, settings_);
  }
}

}  // namespace dlock::backends::mysql
