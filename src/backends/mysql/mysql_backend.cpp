#include "backends/mysql/mysql_backend.hpp"

#include <mysqld_error.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "backends/mysql/connection.hpp"
#include "core/stable_hash.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends {
namespace {

using mysql::Connection;
using mysql::Pool;
using mysql::Row;
using mysql::SqlError;

constexpr const char* kName = "mysql";
constexpr std::size_t kMaxTableName = 60;  // 64 minus the "_seq" of the token-floor table
// TTLs beyond a century are stored as a century (DATETIME ends in 9999).
constexpr std::int64_t kMaxTtlUs = 100LL * 365 * 24 * 3'600'000'000;
// How long a newcomer waits on a key whose row is free while a woken waiter takes it over.
constexpr std::chrono::milliseconds kHandoffRecheck{50};
constexpr int kDeadlockRetries = 20;

std::int64_t ttl_us(std::chrono::milliseconds ttl) {
  return std::clamp<std::int64_t>(ttl.count() * 1000, 0, kMaxTtlUs);
}

std::chrono::milliseconds ceil_ms(const std::optional<std::string>& us_text) {
  const long long us = us_text ? std::stoll(*us_text) : 0;
  return std::chrono::milliseconds(us <= 0 ? 0 : (us + 999) / 1000);
}

std::uint64_t to_u64(const std::optional<std::string>& text) { return text ? std::stoull(*text) : 0; }

// The statements of lease mode for one table. Every expiry is judged by UTC_TIMESTAMP(6), the
// server's clock, fixed for the duration of a statement.
struct LeaseSql {
  explicit LeaseSql(const std::string& table) {
    const std::string t = "`" + table + "`";
    const std::string seq = "`" + table + "_seq`";
    // Parameters: key, owner, ttl, bell, bell, owner, owner.
    // The SELECT list tries the key's doorbell (GET_LOCK) and hands the result to the update
    // through VALUES(doorbell). Columns are assigned left to right and later ones see the new
    // values, so `owner` goes after everything that tests the old owner, and `expires_at` last.
    // A row released by ringing the doorbell (doorbell = 2) may be taken only with the bell:
    // the woken waiter holds it while it takes over, and a newcomer must not barge in. After a
    // second it is open to all, so a bell kept by mistake cannot block the key. A row released
    // without a ring, or expired, is open to anyone.
    const std::string released =
        "(owner = '' AND (doorbell <> 2 OR VALUES(doorbell) = 1 OR expires_at <= UTC_TIMESTAMP(6) - INTERVAL 1 SECOND))";
    const std::string expired = "(owner <> '' AND expires_at <= UTC_TIMESTAMP(6))";
    const std::string take = "(" + released + " OR " + expired + ")";
    const std::string mine = "(owner = ? AND expires_at > UTC_TIMESTAMP(6))";
    acquire = "INSERT INTO " + t +
              " (name, owner, token, hold_count, acquired_at, expires_at, doorbell)"
              " SELECT ?, ?, LAST_INSERT_ID(v + 1), 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,"
              " IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 1, COALESCE(GET_LOCK(?, 0), 0))"
              " FROM " + seq + " WHERE id = 0 LOCK IN SHARE MODE"
              " ON DUPLICATE KEY UPDATE"
              " token = IF(" + take + ", LAST_INSERT_ID(token + 1), IF(" + mine + ", token + 0 * LAST_INSERT_ID(0), token)),"
              " hold_count = IF(" + take + ", 1, IF(" + mine + ", hold_count + 1, hold_count)),"
              " acquired_at = IF(" + take + ", UTC_TIMESTAMP(6), acquired_at),"
              " doorbell = IF(" + take + ", VALUES(doorbell), doorbell),"
              " owner = IF(" + take + ", VALUES(owner), owner),"
              " expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)";
    // After an acquire that changed nothing: the holder, and any doorbell taken for nothing.
    // Parameters: bell, bell, key.
    conflict = "SELECT owner, token, hold_count, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at),"
               " IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), RELEASE_LOCK(?), 0) FROM " + t + " WHERE name = ?";
    // A re-entry answers insert id 0 and is read back. Parameters: key, owner.
    reentered = "SELECT token, hold_count FROM " + t + " WHERE name = ? AND owner = ?";
    // Parameters: ttl, key, owner, token.
    renew = "UPDATE " + t + " SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, renewals = renewals + 1"
            " WHERE name = ? AND owner = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)";
    // The holds left come back as the insert id. The last hold frees the row and rings the
    // doorbell when this session holds it. Parameters: bell, bell, key, owner, token.
    release = "UPDATE " + t + " SET owner = IF(hold_count <= 1, '', owner),"
              " expires_at = IF(hold_count <= 1, UTC_TIMESTAMP(6), expires_at),"
              " doorbell = IF(hold_count <= 1, IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 2 + 0 * RELEASE_LOCK(?), 0), doorbell),"
              " hold_count = LAST_INSERT_ID(hold_count - 1)"
              " WHERE name = ? AND owner = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)";
    drop_bell = "SELECT IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), RELEASE_LOCK(?), 0)";
    const std::string live = "owner <> '' AND expires_at > UTC_TIMESTAMP(6)";
    const std::string info = "owner, token, hold_count, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)";
    inspect = "SELECT " + info + " FROM " + t + " WHERE name = ? AND " + live;
    list_bounded = "SELECT name, " + info + " FROM " + t + " WHERE name >= ? AND name < ? AND name <> ? AND " + live +
                   " ORDER BY name LIMIT ?";
    list_open = "SELECT name, " + info + " FROM " + t + " WHERE name >= ? AND name <> ? AND " + live +
                " ORDER BY name LIMIT ?";
    force_release = "UPDATE " + t + " SET owner = '', hold_count = 0, expires_at = UTC_TIMESTAMP(6), doorbell = 0"
                    " WHERE name = ? AND owner = ? AND token = ? AND " + live;
    lock_floor = "SELECT v FROM " + seq + " WHERE id = 0 FOR UPDATE";
    idle_cutoff = "SELECT UTC_TIMESTAMP(6)";
    raise_floor = "UPDATE " + seq + " SET v = GREATEST(v, (SELECT COALESCE(MAX(token), 0) FROM " + t +
                  " WHERE owner = '' OR expires_at <= ?)) WHERE id = 0";
    delete_idle = "DELETE FROM " + t + " WHERE owner = '' OR expires_at <= ?";
    // The last thing the DDL creates: a concurrent first user may have made only the tables.
    probe = "SELECT v FROM " + seq + " WHERE id = 0";
  }

  std::string acquire, conflict, reentered, renew, release, drop_bell, inspect, list_bounded, list_open, force_release,
      lock_floor, idle_cutoff, raise_floor, delete_idle, probe;
};

struct Settings {
  mysql::ConnectOptions connect;
  std::string table = "dlock_locks";
  bool create_table = true;
};

// Errors that name the fix. The password never appears: messages use the redacted URL.
[[noreturn]] void raise(const SqlError& e, const Settings& settings, std::string_view key = {}) {
  const std::string& url = settings.connect.redacted_url;
  const std::string detail = " (MySQL error " + std::to_string(e.code) + ": " + e.message + ")";
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
  const bool transient = e.code == ER_LOCK_DEADLOCK || e.code == ER_LOCK_WAIT_TIMEOUT;
  throw BackendError("MySQL failed on " + url + detail, kName, std::string(key), transient);
}

class MysqlBackend;

// A waiter's doorbell: GET_LOCK on the key's bell, on a connection of its own, returns when
// the holder's session releases it (its last release, or its end). The waiter keeps the bell
// and makes its next attempt on the same connection, so the bell passes to the new holder
// without anyone else seeing it free: one release wakes one waiter.
class DoorbellChannel final : public backend::WakeChannel {
 public:
  DoorbellChannel(MysqlBackend& backend, std::string key);
  ~DoorbellChannel() override;

  void arm() override {}
  bool wait_until(std::chrono::steady_clock::time_point deadline) override;
  void abandon() noexcept override { drop(); }

  Connection& connection() { return *connection_; }
  std::uint64_t connection_id() const { return connection_->id(); }
  const std::string& bell() const { return bell_; }
  // The attempt made through this channel settled the bell: it went to the new lease, or the
  // conflict report gave it back.
  void bell_settled() noexcept { holds_bell_ = false; }

 private:
  void drop() noexcept;

  MysqlBackend& backend_;
  std::string key_;
  std::string bell_;
  Pool::Lease connection_;
  bool holds_bell_ = false;
  std::chrono::milliseconds backoff_{0};
};

class MysqlBackend final : public backend::Backend {
 public:
  explicit MysqlBackend(Settings settings)
      : settings_(std::move(settings)), sql_(settings_.table), pool_(settings_.connect) {
    auto connection = take();
    set_up(*connection);
  }

  std::string_view name() const noexcept override { return kName; }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override {
    const std::string bell = bell_name(request.key);
    auto* channel = dynamic_cast<DoorbellChannel*>(request.wake);
    std::optional<Pool::Lease> own;
    Connection* connection = nullptr;
    if (channel) {
      connection = &channel->connection();
    } else {
      own.emplace(take_for(request.key, request.owner));
      connection = &**own;
    }
    const std::int64_t ttl = ttl_us(request.ttl);
    const auto outcome = with_retries(request.key, [&] {
      return connection->execute(sql_.acquire, {request.key, request.owner, ttl, bell, bell, request.owner, request.owner});
    });
    if (outcome.affected == 1 || (outcome.affected == 2 && outcome.insert_id != 0)) {
      // A fresh row (its token is the floor plus one) or a takeover (the token plus one).
      remember(request.key, request.owner, connection->id());
      if (channel) channel->bell_settled();
      return backend::Acquired{outcome.insert_id, 1};
    }
    if (outcome.affected == 2) {  // a re-entry
      const auto rows = with_retries(request.key, [&] {
        return connection->query(sql_.reentered, {request.key, request.owner});
      });
      if (rows.empty()) throw BackendError("a re-entry of '" + std::string(request.key) + "' left no row", kName);
      if (channel) channel->bell_settled();
      return backend::Acquired{to_u64(rows[0][0]), static_cast<std::uint32_t>(to_u64(rows[0][1]))};
    }
    // Unchanged: someone else holds it. Report who, and give back a doorbell taken for nothing.
    const auto rows = with_retries(request.key, [&] { return connection->query(sql_.conflict, {bell, bell, request.key}); });
    if (channel) channel->bell_settled();
    if (rows.empty()) throw BackendError("acquire of '" + std::string(request.key) + "' found no row", kName);
    const Row& row = rows[0];
    LockInfo holder{std::string(request.key), row[0].value_or(""), to_u64(row[1]),
                    static_cast<std::uint32_t>(to_u64(row[2])), ceil_ms(row[3])};
    if (holder.owner.empty()) {
      // Free, but a woken waiter holds the doorbell and is taking it over right now.
      holder.owner = "(being handed to a waiting client)";
      holder.ttl_left = kHandoffRecheck;
    }
    return backend::Held{std::move(holder)};
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    auto connection = take();
    const auto outcome = with_retries(lease.key, [&] {
      return connection->execute(sql_.renew,
                                 {ttl_us(ttl), lease.key, lease.owner, static_cast<std::int64_t>(lease.token)});
    });
    return outcome.affected == 1;
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    const std::string bell = bell_name(lease.key);
    auto connection = take_for(lease.key, lease.owner);
    const auto outcome = with_retries(lease.key, [&] {
      return connection->execute(sql_.release,
                                 {bell, bell, lease.key, lease.owner, static_cast<std::int64_t>(lease.token)});
    });
    if (outcome.affected == 1 && outcome.insert_id > 0) return static_cast<std::uint32_t>(outcome.insert_id);
    forget(lease.key, lease.owner);
    if (outcome.affected == 1) return 0u;
    // Lost: a doorbell this session still holds for it would keep waiters asleep.
    with_retries(lease.key, [&] { return connection->query(sql_.drop_bell, {bell, bell}); });
    return std::nullopt;
  }

  std::optional<LockInfo> inspect(std::string_view key) override {
    auto connection = take();
    const auto rows = with_retries(key, [&] { return connection->query(sql_.inspect, {key}); });
    if (rows.empty()) return std::nullopt;
    return info(std::string(key), rows[0], 0);
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    if (limit == 0) return {};
    std::string prefix_end(prefix);
    while (!prefix_end.empty() && static_cast<unsigned char>(prefix_end.back()) == 0xff) prefix_end.pop_back();
    if (!prefix_end.empty()) prefix_end.back() = static_cast<char>(static_cast<unsigned char>(prefix_end.back()) + 1);
    const auto from = std::max(prefix, after);
    const auto fetch = static_cast<std::int64_t>(std::min<std::size_t>(limit, 100'000) + 1);
    auto connection = take();
    const auto rows = with_retries(prefix, [&] {
      return prefix_end.empty() ? connection->query(sql_.list_open, {from, after, fetch})
                                : connection->query(sql_.list_bounded, {from, std::string_view(prefix_end), after, fetch});
    });
    ListPage page;
    for (const Row& row : rows) {
      if (page.locks.size() == limit) {
        page.next_after = page.locks.back().key;
        break;
      }
      page.locks.push_back(info(row[0].value_or(""), row, 1));
    }
    return page;
  }

  std::optional<LockInfo> force_release(std::string_view key) override {
    auto connection = take();
    for (int attempt = 0; attempt < 100; ++attempt) {
      const auto rows = with_retries(key, [&] { return connection->query(sql_.inspect, {key}); });
      if (rows.empty()) return std::nullopt;
      LockInfo held = info(std::string(key), rows[0], 0);
      const auto outcome = with_retries(key, [&] {
        return connection->execute(sql_.force_release, {key, held.owner, static_cast<std::int64_t>(held.token)});
      });
      if (outcome.affected == 1) return held;  // else it changed hands meanwhile: look again
    }
    throw BackendError("'" + std::string(key) + "' kept changing hands during force-release", kName,
                       std::string(key), true);
  }

  std::unique_ptr<backend::WakeChannel> wake_channel(std::string_view key, std::string_view) override {
    return std::make_unique<DoorbellChannel>(*this, std::string(key));
  }

  void ping() override {
    auto connection = take();
    with_retries({}, [&] { return connection->query("SELECT 1", {}); });
  }

  std::size_t collect_idle() override {
    auto connection = take();
    return with_retries({}, [&] {
      // The floor is locked first, as every acquire's read of it is, so the two never
      // deadlock; a key deleted here starts again above the floor.
      connection->run("START TRANSACTION");
      try {
        connection->query(sql_.lock_floor, {});
        const auto cutoff = connection->query(sql_.idle_cutoff, {});
        const std::string at = cutoff.at(0).at(0).value_or("");
        connection->execute(sql_.raise_floor, {std::string_view(at)});
        const auto deleted = connection->execute(sql_.delete_idle, {std::string_view(at)});
        connection->run("COMMIT");
        return static_cast<std::size_t>(deleted.affected);
      } catch (...) {
        if (!connection->broken()) connection->run("ROLLBACK");
        throw;
      }
    });
  }

  // For the channel: a connection of its own, and the settings for error messages.
  Pool::Lease take() {
    try {
      return pool_.take();
    } catch (const SqlError& e) {
      raise(e, settings_);
    }
  }
  // A connection no held lease is pinned to, for a waiter that may block on it for long.
  Pool::Lease take_unpinned() {
    std::vector<std::uint64_t> pinned;
    {
      std::lock_guard lock(sessions_mutex_);
      for (const auto& [lease, id] : sessions_) pinned.push_back(id);
    }
    try {
      return pool_.take_excluding(pinned);
    } catch (const SqlError& e) {
      raise(e, settings_);
    }
  }
  const Settings& settings() const { return settings_; }
  std::string bell_name(std::string_view key) const {
    char hex[17];
    const std::string scope = settings_.connect.database + "." + settings_.table + ":";
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(core::stable_hash(scope + std::string(key))));
    return std::string("dlock:") + hex;
  }

  template <class F>
  auto with_retries(std::string_view key, F&& statement) -> decltype(statement()) {
    for (int attempt = 0;; ++attempt) {
      try {
        return statement();
      } catch (const SqlError& e) {
        // InnoDB may pick a lock statement as a deadlock victim; it was rolled back whole.
        const bool again = (e.code == ER_LOCK_DEADLOCK || e.code == ER_LOCK_WAIT_TIMEOUT) && attempt < kDeadlockRetries;
        if (!again) raise(e, settings_, key);
        std::this_thread::sleep_for(std::chrono::microseconds(100 << std::min(attempt, 6)));
      }
    }
  }

 private:
  // The connection whose session holds this owner's doorbell for the key, if any: re-entry
  // and release must run there (GET_LOCK belongs to a session).
  Pool::Lease take_for(std::string_view key, std::string_view owner) {
    std::optional<std::uint64_t> id;
    {
      std::lock_guard lock(sessions_mutex_);
      if (auto it = sessions_.find({std::string(key), std::string(owner)}); it != sessions_.end()) id = it->second;
    }
    if (!id) return take();
    try {
      return pool_.take(*id);
    } catch (const SqlError& e) {
      raise(e, settings_, key);
    }
  }
  void remember(std::string_view key, std::string_view owner, std::uint64_t connection_id) {
    std::lock_guard lock(sessions_mutex_);
    sessions_[{std::string(key), std::string(owner)}] = connection_id;
  }
  void forget(std::string_view key, std::string_view owner) {
    std::lock_guard lock(sessions_mutex_);
    sessions_.erase({std::string(key), std::string(owner)});
  }

  static LockInfo info(std::string key, const Row& row, std::size_t first) {
    return LockInfo{std::move(key), row[first].value_or(""), to_u64(row[first + 1]),
                    static_cast<std::uint32_t>(to_u64(row[first + 2])), ceil_ms(row[first + 3])};
  }

  void set_up(Connection& connection) {
    try {
      if (!connection.query(sql_.probe, {}).empty()) return;
    } catch (const SqlError& e) {
      if (e.code != ER_NO_SUCH_TABLE) raise(e, settings_);
    }
    if (!settings_.create_table) {
      throw ConfigurationError("table '" + settings_.table + "' does not exist in database '" +
                                   settings_.connect.database +
                                   "' and create_table=false: create it with the DDL of `dlock schema mysql --table " +
                                   settings_.table + "`",
                               kName);
    }
    try {
      const std::string ddl = mysql_lease_schema(settings_.table);
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
        throw ConfigurationError("table '" + settings_.table + "' does not exist and user '" +
                                     settings_.connect.user + "' may not create it (MySQL error " +
                                     std::to_string(e.code) + ": " + e.message +
                                     "); have it created with the DDL of `dlock schema mysql --table " +
                                     settings_.table + "`",
                                 kName);
      }
      raise(e, settings_);
    }
  }

  Settings settings_;
  LeaseSql sql_;
  Pool pool_;
  std::mutex sessions_mutex_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> sessions_;
};

DoorbellChannel::DoorbellChannel(MysqlBackend& backend, std::string key)
    : backend_(backend), key_(std::move(key)), bell_(backend.bell_name(key_)), connection_(backend.take_unpinned()) {}

DoorbellChannel::~DoorbellChannel() { drop(); }

bool DoorbellChannel::wait_until(std::chrono::steady_clock::time_point deadline) {
  drop();  // a doorbell left from an attempt that failed
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline) return false;
  // The wait must end before the connection's read timeout would cut it.
  const auto cap = backend_.settings().connect.read_timeout - std::chrono::seconds(1);
  const auto left = std::min(std::chrono::duration_cast<std::chrono::microseconds>(deadline - now),
                             std::chrono::duration_cast<std::chrono::microseconds>(cap));
  if (backoff_.count() > 0) {
    // The doorbell was free while the key was held (its holder has no session ringing it):
    // back off instead of spinning, up to the holder's lease end that bounds `deadline`.
    std::this_thread::sleep_for(std::min<std::chrono::microseconds>(backoff_, left));
  }
  const auto start = std::chrono::steady_clock::now();
  const auto rows = backend_.with_retries(key_, [&] {
    return connection_->query("SELECT GET_LOCK(?, ? / 1000000)", {std::string_view(bell_), left.count()});
  });
  const bool rang = !rows.empty() && rows[0][0] == std::optional<std::string>("1");
  holds_bell_ = rang;
  if (!rang) return false;
  if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1)) {
    backoff_ = std::clamp(backoff_ * 2, std::chrono::milliseconds(1), std::chrono::milliseconds(250));
  } else {
    backoff_ = std::chrono::milliseconds(0);
  }
  return true;
}

void DoorbellChannel::drop() noexcept {
  if (!holds_bell_) return;
  holds_bell_ = false;
  try {
    connection_->query("SELECT RELEASE_LOCK(?)", {std::string_view(bell_)});
  } catch (...) {
    // The session is gone, and its locks with it.
  }
}

bool valid_table_name(const std::string& name) {
  return !name.empty() && name.size() <= kMaxTableName &&
         std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

std::string mysql_lease_schema(const std::string& table) {
  if (!valid_table_name(table)) {
    throw ConfigurationError("mysql:// table '" + table + "' must be 1 to " + std::to_string(kMaxTableName) +
                                 " letters, digits or underscores",
                             kName);
  }
  return "CREATE TABLE IF NOT EXISTS `" + table +
         "` (\n"
         "  name        VARBINARY(1024) NOT NULL,        -- the key, compared bytewise\n"
         "  owner       VARBINARY(128)  NOT NULL,        -- '' when free\n"
         "  token       BIGINT UNSIGNED NOT NULL,        -- fencing token of the last acquisition\n"
         "  hold_count  INT UNSIGNED    NOT NULL,\n"
         "  acquired_at DATETIME(6)     NOT NULL,        -- UTC_TIMESTAMP(6), the server's clock\n"
         "  expires_at  DATETIME(6)     NOT NULL,\n"
         "  renewals    BIGINT UNSIGNED NOT NULL DEFAULT 0,  -- every renew changes the row\n"
         "  doorbell    TINYINT         NOT NULL DEFAULT 0,  -- 1: the holder's session holds the key's GET_LOCK bell,\n"
         "                                                   -- 2: released by ringing it (a waiter is taking over)\n"
         "  PRIMARY KEY (name)\n"
         ") ENGINE=InnoDB;\n"
         "CREATE TABLE IF NOT EXISTS `" +
         table +
         "_seq` (\n"
         "  id TINYINT UNSIGNED NOT NULL PRIMARY KEY,\n"
         "  v  BIGINT UNSIGNED  NOT NULL                 -- token floor for keys whose row was removed\n"
         ") ENGINE=InnoDB;\n"
         "INSERT IGNORE INTO `" +
         table + "_seq` VALUES (0, 0);\n";
}

std::shared_ptr<backend::Backend> make_mysql_backend(const core::Url& url) {
  Settings settings;
  core::UrlOptions options(url);
  settings.table = options.take_string("table").value_or(settings.table);
  const std::string mode = options.take_string("mode").value_or("lease");
  settings.create_table = options.take_bool("create_table").value_or(true);
  auto& c = settings.connect;
  c.connect_timeout = options.take_duration("connect_timeout").value_or(c.connect_timeout);
  c.read_timeout = options.take_duration("read_timeout").value_or(c.read_timeout);
  c.write_timeout = options.take_duration("write_timeout").value_or(c.write_timeout);
  c.ssl_mode = options.take_string("ssl-mode").value_or(c.ssl_mode);
  c.ssl_ca = options.take_string("ssl-ca").value_or("");
  options.finish();
  c.redacted_url = url.redacted();
  if (mode != "lease") {
    throw ConfigurationError("mysql:// mode '" + mode + "' is not available in this build; use mode=lease", kName);
  }
  mysql_lease_schema(settings.table);  // validates the name
  static const char* const kSslModes[] = {"disabled", "preferred", "required", "verify-ca", "verify-identity"};
  if (std::find(std::begin(kSslModes), std::end(kSslModes), c.ssl_mode) == std::end(kSslModes)) {
    throw ConfigurationError("mysql:// ssl-mode must be disabled, preferred, required, verify-ca or verify-identity; got '" +
                                 c.ssl_mode + "'",
                             kName);
  }
  if (c.read_timeout < std::chrono::seconds(2)) {
    throw ConfigurationError("mysql:// read_timeout must be at least 2s (waiters block on the server that long)", kName);
  }
  if (url.host.empty() || url.path.size() < 2 || url.path.find('/', 1) != std::string::npos) {
    throw ConfigurationError("mysql:// needs a host and a database: mysql://user:password@host:3306/database; got " +
                                 url.redacted(),
                             kName);
  }
  if (url.user.empty()) {
    throw ConfigurationError("mysql:// needs a user: mysql://user:password@host:3306/database; got " + url.redacted(), kName);
  }
  c.host = url.host;
  c.port = url.port.value_or(3306);
  c.user = url.user;
  c.password = url.password;
  c.database = url.path.substr(1);
  return std::make_shared<MysqlBackend>(std::move(settings));
}

}  // namespace dlock::backends
