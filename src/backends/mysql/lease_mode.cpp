// mysql:// lease mode: a lock table keyed by name, each acquire, renew and release one
// statement judged by the server's clock.

#include <mysqld_error.h>

#include "backends/mysql/common.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::mysql {
namespace {

// How long a newcomer waits on a key whose row is free while a woken waiter takes it over.
constexpr std::chrono::milliseconds kHandoffRecheck{50};

// The statements of lease mode for one table. Every expiry is judged by the server's clock:
// UTC_TIMESTAMP(6), fixed for the duration of a statement, or in the takeover the time its
// wait ended.
struct LeaseSql {
  explicit LeaseSql(const std::string& table) {
    const std::string t = "`" + table + "`";
    const std::string seq = "`" + table + "_seq`";
    // Parameters: key, owner, ttl, bell, bell, owner, owner.
    const std::string try_bell = "IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 1, COALESCE(GET_LOCK(?, 0), 0))";
    acquire = acquire_sql(t, seq, "UTC_TIMESTAMP(6)", try_bell, "");
    // The takeover: the same, after waiting for the bell. Parameters: key, owner, ttl, bell,
    // bell, wait in microseconds, owner, owner. The wait is a derived table, filled before the
    // statement locks any row, so a waiter blocks no one. SYSDATE(6) (UTC, as every session
    // runs in UTC) is read after the wait, so the lease runs from when the bell rang.
    const std::string wait_bell = "IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 1, COALESCE(GET_LOCK(?, ? / 1000000), 0))";
    takeover = acquire_sql(t, seq, "w.now", "w.rang",
                           "(SELECT " + wait_bell + " AS rang, SYSDATE(6) AS now LIMIT 1) AS w, ");
    // After an acquire that changed nothing: the holder, and any doorbell taken for nothing.
    // Parameters: bell, bell, key.
    conflict = "SELECT owner, token, hold_count, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at),"
               " IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), RELEASE_LOCK(?), 0) FROM " + t + " WHERE name = ?";
    // Parameters: key, owner.
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
  }

  // The acquire statement, with `now` and `rang` (the doorbell taken) read from `from`.
  // The SELECT list hands the time and the doorbell to the update part, which reads them back
  // as VALUES(acquired_at) and VALUES(doorbell). Columns are assigned left to right and later
  // ones see the new values, so `owner` goes after everything that tests the old owner, and
  // `expires_at` last. A row released by ringing the doorbell (doorbell = 2) may be taken only
  // with the bell: the woken waiter holds it while it takes over, and a newcomer must not barge
  // in. After a second it is open to all, so a bell kept by mistake cannot block the key. A row
  // released without a ring, or expired, is open to anyone.
  static std::string acquire_sql(const std::string& t, const std::string& seq, const std::string& now,
                                 const std::string& rang, const std::string& from) {
    const std::string at = "VALUES(acquired_at)";
    const std::string released = "(owner = '' AND (doorbell <> 2 OR VALUES(doorbell) = 1 OR expires_at <= " + at +
                                 " - INTERVAL 1 SECOND))";
    const std::string expired = "(owner <> '' AND expires_at <= " + at + ")";
    const std::string take = "(" + released + " OR " + expired + ")";
    const std::string mine = "(owner = ? AND expires_at > " + at + ")";
    return "INSERT INTO " + t + " (name, owner, token, hold_count, acquired_at, expires_at, doorbell)"
           " SELECT ?, ?, LAST_INSERT_ID(v + 1), 1, " + now + ", " + now + " + INTERVAL ? MICROSECOND, " + rang +
           " FROM " + from + seq + " WHERE id = 0 LOCK IN SHARE MODE"
           " ON DUPLICATE KEY UPDATE"
           " token = IF(" + take + ", LAST_INSERT_ID(token + 1), IF(" + mine + ", token + 0 * LAST_INSERT_ID(0), token)),"
           " hold_count = IF(" + take + ", 1, IF(" + mine + ", hold_count + 1, hold_count)),"
           " acquired_at = IF(" + take + ", " + at + ", acquired_at),"
           " doorbell = IF(" + take + ", VALUES(doorbell), doorbell),"
           " owner = IF(" + take + ", VALUES(owner), owner),"
           " expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)";
  }

  std::string acquire, takeover, conflict, reentered, renew, release, drop_bell, inspect, list_bounded, list_open, force_release,
      lock_floor, idle_cutoff, raise_floor, delete_idle;
};

class LeaseBackend final : public ModeBackend {
 public:
  explicit LeaseBackend(Settings settings) : ModeBackend(std::move(settings)), sql_(settings_.table) {
    auto connection = take();
    ensure_lock_table(*connection);
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override {
    const std::string bell = bell_name(request.key);
    Attempt attempt = attempt_for(request, false);
    Connection* connection = attempt.connection;
    DoorbellChannel* channel = attempt.channel;
    if (channel) {
      if (auto taken = channel->claim()) return *taken;
    }
    const std::int64_t ttl = ttl_us(request.ttl);
    const auto outcome = with_retries(request.key, [&] {
      return connection->execute(sql_.acquire, {request.key, request.owner, ttl, bell, bell, request.owner, request.owner});
    });
    if (auto acquired = settle(outcome, *connection, request.key, request.owner)) {
      if (channel) channel->bell_settled();
      return *acquired;
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

  std::unique_ptr<backend::WakeChannel> wake_channel(std::string_view key, std::string_view) override {
    std::string held_key(key);
    auto takeover = [this, held_key](Connection& connection, std::string_view owner, std::chrono::milliseconds ttl,
                                     std::chrono::microseconds wait) {
      const std::string bell = bell_name(held_key);
      // Not retried here: the channel treats a failure as a spurious wake-up.
      const auto outcome = connection.execute(sql_.takeover, {std::string_view(held_key), owner, ttl_us(ttl), bell,
                                                              bell, wait.count(), owner, owner});
      return settle(outcome, connection, held_key, owner);
    };
    return std::make_unique<DoorbellChannel>(*this, std::move(held_key), std::move(takeover));
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
    return list_page(prefix, after, limit, sql_.list_bounded, sql_.list_open);
  }

  std::optional<LockInfo> force_release(std::string_view key) override {
    return evict(key, sql_.inspect, sql_.force_release);
  }

  std::size_t collect_idle() override {
    auto connection = take();
    return with_retries({}, [&] {
      // The floor is locked first, as every acquire's read of it is, so the two never
      // deadlock; a key deleted here starts again above the floor.
      return in_transaction(*connection, [&] {
        connection->query(sql_.lock_floor, {});
        const auto cutoff = connection->query(sql_.idle_cutoff, {});
        const std::string at = cutoff.at(0).at(0).value_or("");
        connection->execute(sql_.raise_floor, {std::string_view(at)});
        return static_cast<std::size_t>(connection->execute(sql_.delete_idle, {std::string_view(at)}).affected);
      });
    });
  }

 private:
  // The acquisition an acquire statement made, if any, read from its affected rows.
  std::optional<backend::Acquired> settle(const Outcome& outcome, Connection& connection, std::string_view key,
                                          std::string_view owner) {
    if (outcome.affected == 1 || (outcome.affected == 2 && outcome.insert_id != 0)) {
      // A fresh row (its token is the floor plus one) or a takeover (the token plus one).
      remember(key, owner, connection.serial());
      return backend::Acquired{outcome.insert_id, 1};
    }
    if (outcome.affected != 2) return std::nullopt;
    // A re-entry: it answers insert id 0 and is read back.
    const auto rows = with_retries(key, [&] { return connection.query(sql_.reentered, {key, owner}); });
    if (rows.empty()) throw BackendError("a re-entry of '" + std::string(key) + "' left no row", kName);
    return backend::Acquired{to_u64(rows[0][0]), static_cast<std::uint32_t>(to_u64(rows[0][1]))};
  }

  LeaseSql sql_;
};

}  // namespace

std::shared_ptr<backend::Backend> make_lease_backend(Settings settings) {
  return std::make_shared<LeaseBackend>(std::move(settings));
}

}  // namespace dlock::backends::mysql
