// mysql:// session mode: the lock is the key's GET_LOCK, held by a database connection of its
// own (seed 002). It dies with that connection, so it needs no lease: a crashed holder frees
// the key at once, and a holder whose connection failed learns of the loss at its next renew.
// The lock table keeps what GET_LOCK cannot: the owner, the hold count and a fencing token,
// and which connection holds the lock (session_id), so every check of a row is also a check
// that its session is still alive.

#include <mysqld_error.h>

#include <thread>

#include "backends/mysql/common.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::mysql {
namespace {

// What a holder whose renewals are overdue reports as its time left: its lock lasts as long
// as its connection, so waiters look again now and then (the doorbell wakes them earlier).
constexpr std::int64_t kOverdueRecheckUs = 1'000'000;
// How long a woken waiter's takeover (it holds the bell, the row is not yet written) is
// reported to last.
constexpr std::chrono::milliseconds kHandoffRecheck{50};

struct SessionSql {
  explicit SessionSql(const std::string& table) {
    const std::string t = "`" + table + "`";
    const std::string seq = "`" + table + "_seq`";
    const std::string now = "UTC_TIMESTAMP(6)";
    // The row is ours to re-enter only when this connection held the lock before this
    // statement (the first parameter, from the client's own records): connection ids repeat
    // after a server restart, so a row naming this id may be a dead session's.
    const std::string mine = "(? AND owner = VALUES(owner) AND session_id = CONNECTION_ID() AND hold_count > 0)";
    // The SELECT yields a row only when this session holds the key's GET_LOCK, taking it if
    // free; then whatever the row says is stale unless it is ours. Columns are assigned left
    // to right: `owner` after everything that tests the old owner.
    // Parameters: key, owner, ttl, bell, bell, known, known, known.
    acquire = "INSERT INTO " + t + " (name, owner, token, hold_count, acquired_at, expires_at, session_id)"
              " SELECT ?, ?, LAST_INSERT_ID(v + 1), 1, " + now + ", " + now + " + INTERVAL ? MICROSECOND, CONNECTION_ID()"
              " FROM " + seq + " WHERE id = 0 AND (IS_USED_LOCK(?) <=> CONNECTION_ID() OR GET_LOCK(?, 0) = 1)"
              " LOCK IN SHARE MODE"
              " ON DUPLICATE KEY UPDATE"
              " token = IF(" + mine + ", token + 0 * LAST_INSERT_ID(0), LAST_INSERT_ID(token + 1)),"
              " hold_count = IF(" + mine + ", hold_count + 1, 1),"
              " acquired_at = IF(" + mine + ", acquired_at, VALUES(acquired_at)),"
              " owner = VALUES(owner), session_id = CONNECTION_ID(), expires_at = VALUES(expires_at),"
              " renewals = renewals + 1";
    reentered = "SELECT token, hold_count FROM " + t + " WHERE name = ? AND owner = ?";
    const std::string live = " AND hold_count > 0 AND session_id = IS_USED_LOCK(?)";
    const std::string left = "IF(expires_at > " + now + ", TIMESTAMPDIFF(MICROSECOND, " + now + ", expires_at), " +
                             std::to_string(kOverdueRecheckUs) + ")";
    const std::string info = "owner, token, hold_count, " + left + ", TIMESTAMPDIFF(MICROSECOND, acquired_at, " + now + ")";
    // Parameters: bell, key. The last column says whether the row's session holds the lock.
    conflict = "SELECT " + info + ", session_id = IS_USED_LOCK(?) FROM " + t + " WHERE name = ?";
    // Another connection of the same owner holds it (an explicit owner shared by clients).
    // The new hold count comes back as the insert id. Parameters: ttl, key, owner, token, bell.
    reenter_elsewhere = "UPDATE " + t + " SET hold_count = LAST_INSERT_ID(hold_count + 1), expires_at = " + now +
                        " + INTERVAL ? MICROSECOND WHERE name = ? AND owner = ? AND token = ?" + live;
    const std::string ours = " WHERE name = ? AND owner = ? AND token = ?" + live;
    // Parameters: ttl, key, owner, token, bell.
    renew = "UPDATE " + t + " SET expires_at = " + now + " + INTERVAL ? MICROSECOND, renewals = renewals + 1" + ours;
    // The last hold frees the row, and the lock with it when this connection holds it. The
    // holds left come back as the insert id. Parameters: bell, key, owner, token, bell.
    release = "UPDATE " + t + " SET owner = IF(hold_count <= 1, '', owner),"
              " expires_at = IF(hold_count <= 1, " + now + ", expires_at),"
              " session_id = IF(hold_count <= 1 AND session_id = CONNECTION_ID(), 0 * RELEASE_LOCK(?), session_id),"
              " hold_count = LAST_INSERT_ID(hold_count - 1)" + ours;
    drop_bell = "SELECT IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), RELEASE_LOCK(?), 0)";
    // Parameters: key, bell.
    inspect = "SELECT " + info + " FROM " + t + " WHERE name = ? AND owner <> ''" + live;
    // A session is checked per row through its bell, which only the client can name: the
    // query returns the session and the client asks the server about each bell.
    list_bounded = "SELECT name, " + info + ", session_id FROM " + t +
                   " WHERE name >= ? AND name < ? AND name <> ? AND owner <> '' AND hold_count > 0 ORDER BY name LIMIT ?";
    list_open = "SELECT name, " + info + ", session_id FROM " + t +
                " WHERE name >= ? AND name <> ? AND owner <> '' AND hold_count > 0 ORDER BY name LIMIT ?";
    session_of = "SELECT IS_USED_LOCK(?)";
    // Parameters: key, owner, token, bell.
    force_release = "UPDATE " + t + " SET owner = '', hold_count = 0, expires_at = " + now + ours;
    // Parameters: key, token.
    orphaned = "SELECT session_id FROM " + t + " WHERE name = ? AND token = ? AND owner = '' AND session_id <> 0";
    settle = "UPDATE " + t + " SET session_id = 0 WHERE name = ? AND token = ? AND owner = ''";
    lock_floor = "SELECT v FROM " + seq + " WHERE id = 0 FOR UPDATE";
    // Rows of live sessions keep an owner; a row whose session died keeps its owner too until
    // the next acquire takes it over, so only released rows are removed.
    raise_floor = "UPDATE " + seq + " SET v = GREATEST(v, (SELECT COALESCE(MAX(token), 0) FROM " + t +
                  " WHERE owner = '')) WHERE id = 0";
    delete_idle = "DELETE FROM " + t + " WHERE owner = ''";
  }

  std::string acquire, reentered, conflict, reenter_elsewhere, renew, release, drop_bell, inspect, list_bounded,
      list_open, session_of, force_release, orphaned, settle, lock_floor, raise_floor, delete_idle;
};

class SessionBackend final : public ModeBackend {
 public:
  explicit SessionBackend(Settings settings) : ModeBackend(std::move(settings)), sql_(settings_.table) {
    auto connection = take();
    ensure_lock_table(*connection);  // also checks for session_id
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override {
    const std::string bell = bell_name(request.key);
    // A new lock gets a connection of its own: ending that connection (force-release) must
    // not end other locks.
    Attempt attempt = attempt_for(request, true);
    Connection* connection = attempt.connection;
    const std::int64_t known = remembered(request.key, request.owner) == connection->serial() ? 1 : 0;
    const std::int64_t ttl = ttl_us(request.ttl);
    Outcome outcome;
    try {
      outcome = with_retries(request.key, [&] {
        return connection->execute(sql_.acquire, {request.key, request.owner, ttl, bell, bell, known, known, known});
      });
    } catch (...) {
      // A lock taken by a statement that then failed would block the key until this
      // connection ends.
      if (!connection->broken() && !known) drop_bell(*connection, bell);
      if (attempt.channel) attempt.channel->bell_settled();
      throw;
    }
    if (attempt.channel) attempt.channel->bell_settled();
    if (outcome.affected == 1 || (outcome.affected == 2 && outcome.insert_id != 0)) {
      remember(request.key, request.owner, connection->serial());
      return backend::Acquired{outcome.insert_id, 1};
    }
    if (outcome.affected == 2) {  // a re-entry on this connection
      const auto rows = with_retries(request.key, [&] {
        return connection->query(sql_.reentered, {request.key, request.owner});
      });
      if (rows.empty()) throw BackendError("a re-entry of '" + std::string(request.key) + "' left no row", kName);
      return backend::Acquired{to_u64(rows[0][0]), static_cast<std::uint32_t>(to_u64(rows[0][1]))};
    }
    // Another connection holds the lock.
    const auto rows = with_retries(request.key, [&] { return connection->query(sql_.conflict, {bell, request.key}); });
    const bool live = !rows.empty() && rows[0][5] == std::optional<std::string>("1");
    if (!live) {
      // Its holder has the lock but has not written the row yet (a woken waiter taking over).
      return backend::Held{LockInfo{std::string(request.key), "(being handed to a waiting client)", 0, 1, kHandoffRecheck}};
    }
    LockInfo holder = info(std::string(request.key), rows[0], 0);
    if (holder.owner == request.owner) {
      const auto token = static_cast<std::int64_t>(holder.token);
      const auto again = with_retries(request.key, [&] {
        return connection->execute(sql_.reenter_elsewhere, {ttl, request.key, request.owner, token, bell});
      });
      if (again.affected == 1) return backend::Acquired{holder.token, static_cast<std::uint32_t>(again.insert_id)};
    }
    return backend::Held{std::move(holder)};
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    const std::string bell = bell_name(lease.key);
    auto connection = take();
    const auto outcome = with_retries(lease.key, [&] {
      return connection->execute(sql_.renew,
                                 {ttl_us(ttl), lease.key, lease.owner, static_cast<std::int64_t>(lease.token), bell});
    });
    return outcome.affected == 1;
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    const std::string bell = bell_name(lease.key);
    auto connection = take_for(lease.key, lease.owner);
    const bool on_holder = remembered(lease.key, lease.owner) == connection->serial();
    const auto token = static_cast<std::int64_t>(lease.token);
    const auto outcome = with_retries(lease.key, [&] {
      return connection->execute(sql_.release, {bell, lease.key, lease.owner, token, bell});
    });
    if (outcome.affected == 1 && outcome.insert_id > 0) return static_cast<std::uint32_t>(outcome.insert_id);
    forget(lease.key, lease.owner);
    if (outcome.affected != 1) return std::nullopt;
    // The last hold, released from a connection other than the holder's (a shared explicit
    // owner): the lock ends with the holder's connection.
    if (!on_holder) end_orphaned_session(*connection, lease.key, token, bell);
    return 0u;
  }

  std::optional<LockInfo> inspect(std::string_view key) override {
    const std::string bell = bell_name(key);
    auto connection = take();
    const auto rows = with_retries(key, [&] { return connection->query(sql_.inspect, {key, bell}); });
    if (rows.empty()) return std::nullopt;
    return info(std::string(key), rows[0], 0);
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    // Keep the rows whose session still holds the key's lock.
    return list_page(prefix, after, limit, sql_.list_bounded, sql_.list_open, [&](Connection& c, const Row& row) {
      const auto holder = c.query(sql_.session_of, {bell_name(row[0].value_or(""))});
      return !holder.empty() && holder[0][0] == row[6];
    });
  }

  std::optional<LockInfo> force_release(std::string_view key, Eviction /*eviction*/) override {
    const std::string bell = bell_name(key);
    return evict(key, sql_.inspect, sql_.force_release, bell, [&](Connection& connection, std::int64_t token) {
      end_orphaned_session(connection, key, token, bell);
    });
  }

  std::size_t collect_idle() override {
    auto connection = take();
    return with_retries({}, [&] {
      return in_transaction(*connection, [&] {
        connection->query(sql_.lock_floor, {});
        connection->execute(sql_.raise_floor, {});
        return static_cast<std::size_t>(connection->execute(sql_.delete_idle, {}).affected);
      });
    });
  }

 private:
  void drop_bell(Connection& connection, const std::string& bell) noexcept {
    try {
      connection.query(sql_.drop_bell, {bell, bell});
    } catch (...) {
      // The session is gone, and its locks with it.
    }
  }

  // A freed row whose lock is still held by another connection: end that connection (it
  // holds this lock only), then mark the row settled.
  void end_orphaned_session(Connection& connection, std::string_view key, std::int64_t token, const std::string& bell) {
    const auto rows = with_retries(key, [&] { return connection.query(sql_.orphaned, {key, token}); });
    if (rows.empty()) return;  // released by its own connection
    const std::uint64_t session = to_u64(rows[0][0]);
    if (session == connection.id()) {
      drop_bell(connection, bell);
    } else {
      try {
        connection.run("KILL CONNECTION " + std::to_string(session));
      } catch (const SqlError& e) {
        if (e.code == ER_KILL_DENIED_ERROR) {
          throw ConfigurationError("session mode frees a lock held by another connection by ending it, but user '" +
                                       settings_.connect.user + "' may not end connection " + std::to_string(session) +
                                       " (MySQL error " + std::to_string(e.code) + ": " + e.message +
                                       "); grant CONNECTION ADMIN (MariaDB) or run every client as one user",
                                   kName);
        }
        if (e.code != ER_NO_SUCH_THREAD) raise(e, settings_, key);
      }
      // KILL returns before the session is gone; the key is free when its lock is.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (std::chrono::steady_clock::now() < deadline) {
        const auto holder = with_retries(key, [&] { return connection.query(sql_.session_of, {bell}); });
        if (holder.empty() || holder[0][0] != std::optional<std::string>(std::to_string(session))) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    with_retries(key, [&] { return connection.execute(sql_.settle, {key, token}); });
  }

  SessionSql sql_;
};

}  // namespace

std::shared_ptr<backend::Backend> make_session_backend(Settings settings) {
  return std::make_shared<SessionBackend>(std::move(settings));
}

}  // namespace dlock::backends::mysql
