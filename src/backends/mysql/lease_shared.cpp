// mysql:// lease mode's shared holds (lease_shared.hpp).

#include "backends/mysql/lease_shared.hpp"

namespace dlock::backends::mysql {
LeaseShared::LeaseShared(ModeBackend& backend, const std::string& table) : SharedHolds(backend, table, table) {
  const std::string t = "`" + table + "`";
  const std::string s = "`" + table + "_shared`";
  const std::string c = "`" + table + "_claim`";
  const std::string seq = "`" + table + "_seq`";
  const std::string now = "UTC_TIMESTAMP(6)";
  const std::string shared = std::string("'").append(kSharedOwner).append("'");
  const std::string until = " + INTERVAL ? MICROSECOND";
  // The key's row, locked: as a holder (owner, token, holds, microseconds left, held for),
  // whether a woken waiter holding the doorbell is taking it over (lease_mode.cpp: released
  // by ringing, for a second only the bell's holder's, once someone has it), and a live
  // claim's microseconds left (NULL for none). Parameters: bell, key.
  lock_key_ = "SELECT owner, token, hold_count, TIMESTAMPDIFF(MICROSECOND, " + now + ", expires_at),"
              " TIMESTAMPDIFF(MICROSECOND, acquired_at, " + now + "),"
              " (owner = '' AND doorbell = 2 AND expires_at > " + now + " - INTERVAL 1 SECOND"
              " AND COALESCE(IS_USED_LOCK(?), CONNECTION_ID()) <> CONNECTION_ID()),"
              " (SELECT TIMESTAMPDIFF(MICROSECOND, " + now + ", c.expires_at) FROM " + c +
              " AS c WHERE c.name = t.name AND c.token >= t.token AND c.expires_at > " + now + ")"
              " FROM " + t + " AS t WHERE name = ? FOR UPDATE";
  // A free row for a new key, its token the floor (the next acquisition's is above it), made
  // outside the transaction that then locks it. Parameter: key.
  add_row_ = "INSERT IGNORE INTO " + t + " (name, owner, token, hold_count, acquired_at, expires_at)"
             " SELECT ?, '', v, 0, " + now + ", " + now + " FROM " + seq + " WHERE id = 0 LOCK IN SHARE MODE";
  // (owner, token, holds, microseconds left, held for, permits). Parameter: key.
  holders_ = "SELECT s.owner, s.token, s.hold_count, TIMESTAMPDIFF(MICROSECOND, " + now + ", s.expires_at),"
             " TIMESTAMPDIFF(MICROSECOND, s.acquired_at, " + now + "), s.permits FROM " + t + " AS t JOIN " + s +
             " AS s ON s.name = t.name WHERE t.name = ? AND t.owner = " + shared + " AND s.expires_at > " + now +
             " ORDER BY s.token";
  locked_holders_ = holders_ + " FOR UPDATE";
  // Parameters: ttl, key. A re-entry never shortens a lease.
  reenter_exclusive_ = "UPDATE " + t + " SET hold_count = hold_count + 1, expires_at = GREATEST(expires_at, " + now +
                       until + ") WHERE name = ?";
  // Parameters: ttl, ttl, key, token.
  reenter_shared_ = "UPDATE " + t + " AS t STRAIGHT_JOIN " + s + " AS s ON s.name = t.name"
                    " SET s.hold_count = s.hold_count + 1, s.expires_at = GREATEST(s.expires_at, " + now + until + "),"
                    " t.expires_at = GREATEST(t.expires_at, " + now + until + ") WHERE t.name = ? AND s.token = ?";
  // Parameters: key, token, owner, permits, ttl.
  add_holder_ = "INSERT INTO " + s + " (name, token, owner, hold_count, permits, acquired_at, expires_at)"
                " VALUES (?, ?, ?, 1, ?, " + now + ", " + now + until + ")";
  // The row of a key held shared: the key's new token and the latest expiry; and the new
  // holder's lock, taken in the transaction's last statement (its row already locked: it
  // cannot deadlock, so it is not rolled back after taking the lock). Columns are assigned
  // left to right: `owner` after everything that tests the old one. Parameters: ttl, ttl,
  // token, bell, token, bell, token, key.
  const std::string still_shared = "(owner = " + shared + " AND expires_at > " + now + ")";
  const std::string holder_lock = "CONCAT(?, ':', ?)";
  mark_shared_ = "UPDATE " + t + " SET acquired_at = IF(" + still_shared + ", acquired_at, " + now + "),"
                 " expires_at = IF(" + still_shared + ", GREATEST(expires_at, " + now + until + "), " + now + until + "),"
                 " token = ?, hold_count = 1, doorbell = 0 * IF(IS_USED_LOCK(" + holder_lock + ") <=> CONNECTION_ID(), 1,"
                 " COALESCE(GET_LOCK(" + holder_lock + ", 0), 0)), session_id = 0, readers_until = '1000-01-01',"
                 " owner = " + shared + " WHERE name = ?";
  // A waiting reader refused by the exclusive holder claims the key for the readers behind
  // that holder, on its row, locked: until the claim runs out, no new writer takes the key,
  // nor does a release hand it to a waiting writer. Parameters: claim, key.
  claim_readers_ = "UPDATE " + t + " SET readers_until = " + now + " + INTERVAL ? MICROSECOND WHERE name = ?";
  // The key's row first (STRAIGHT_JOIN), as every shared step locks it. Parameters: ttl, ttl,
  // key, owner, token.
  renew_ = "UPDATE " + t + " AS t STRAIGHT_JOIN " + s + " AS s ON s.name = t.name"
           " SET s.expires_at = " + now + until + ", t.expires_at = GREATEST(t.expires_at, " + now + until + ")"
           " WHERE t.name = ? AND t.owner = " + shared + " AND s.owner = ? AND s.token = ? AND s.hold_count > 0"
           " AND s.expires_at > " + now;
  // The last hold gives up its lock here: a writer woken by that finds the key's row locked
  // until this transaction commits. Parameters: bell, key, owner, token.
  find_hold_ = "SELECT s.hold_count, IF(s.hold_count <= 1, RELEASE_LOCK(CONCAT(?, ':', s.token)), 0) FROM " + t +
               " AS t STRAIGHT_JOIN " + s + " AS s ON s.name = t.name"
               " WHERE t.name = ? AND t.owner = " + shared + " AND s.owner = ? AND s.token = ? AND s.expires_at > " +
               now + " FOR UPDATE";
  // Parameters of the three: key, token.
  drop_hold_ = "UPDATE " + s + " SET hold_count = hold_count - 1 WHERE name = ? AND token = ?";
  delete_hold_ = "DELETE FROM " + s + " WHERE name = ? AND token = ?";
  evict_hold_ = "UPDATE " + s + " SET hold_count = 0 WHERE name = ? AND token = ?";
  // The latest expiry of the holders left, or a free row. Parameter: key.
  settle_ = "UPDATE " + t + " AS t SET expires_at = COALESCE((SELECT MAX(s.expires_at) FROM " + s +
            " AS s WHERE s.name = t.name AND s.expires_at > " + now + "), " + now + "),"
            " hold_count = IF(expires_at > " + now + ", hold_count, 0), owner = IF(expires_at > " + now +
            ", owner, '') WHERE name = ? AND owner = " + shared;
  // Parameters: bell, token.
  drop_holder_lock_ = "SELECT RELEASE_LOCK(" + holder_lock + ")";
  // Parameter: key.
  held_shared_ = "SELECT " + still_shared + " FROM " + t + " WHERE name = ? FOR UPDATE";
  // A page of keys (the inner LIMIT), each with its exclusive holder or its shared ones.
  const auto list = [&](const std::string& range) {
    const auto either = [](const std::string& column) { return "IF(k.sh, s." + column + ", k." + column + ")"; };
    return "SELECT k.name, " + either("owner") + ", " + either("token") + ", " + either("hold_count") +
           ", TIMESTAMPDIFF(MICROSECOND, " + now + ", " + either("expires_at") + "), TIMESTAMPDIFF(MICROSECOND, " +
           either("acquired_at") + ", " + now + "), k.sh FROM (SELECT name, owner, token, hold_count, acquired_at,"
           " expires_at, owner = " + shared + " AS sh FROM " + t + " WHERE " + range + " AND name <> ? AND owner <> ''"
           " AND expires_at > " + now + " ORDER BY name LIMIT ?) AS k LEFT JOIN " + s +
           " AS s ON k.sh AND s.name = k.name AND s.expires_at > " + now +
           " WHERE NOT k.sh OR s.token IS NOT NULL ORDER BY k.name, s.token";
  };
  list_bounded_ = list("name >= ? AND name < ?");
  list_open_ = list("name >= ?");
  // Parameter of both: the cutoff.
  idle_holds_ = "DELETE FROM " + s + " WHERE expires_at <= ?";
  idle_claims_ = "DELETE FROM " + c + " WHERE expires_at <= ?";
}

backend::AcquireResult LeaseShared::acquire(Connection& connection, const backend::AcquireRequest& r) {
  const std::string bell = backend_.bell_name(r.key);
  const std::int64_t ttl = ttl_us(r.ttl);
  for (;;) {
    auto result = backend_.with_retries(r.key, [&] {
      return ModeBackend::in_transaction(connection, [&]() -> std::optional<backend::AcquireResult> {
        const auto rows = connection.query(lock_key_, {bell, r.key});
        if (rows.empty()) return std::nullopt;
        const Row& row = rows[0];
        LockInfo key = ModeBackend::info(std::string(r.key), row, 0);
        const bool live = !key.owner.empty() && key.ttl_left.count() > 0;
        if (live && key.owner != kSharedOwner) {
          if (key.owner == r.owner && key.hold_count > 0) {  // a writer may also read
            connection.execute(reenter_exclusive_, {ttl, r.key});
            return backend::Acquired{key.token, key.hold_count + 1};
          }
          auto left = key.ttl_left;
          if (r.waiting) {
            connection.execute(claim_readers_, {ttl_us(backend::kWriterClaim), r.key});
            left = std::min<std::chrono::milliseconds>(left, backend::kWriterClaim / 2);
          }
          return backend::Busy{{std::move(key)}, left};
        }
        if (row[5] == std::optional<std::string>("1")) return backend::Busy{{}, kSharedRecheck};
        std::optional<std::uint32_t> permits;
        auto holders = live ? locked_holders(connection, r.key, &permits) : std::vector<LockInfo>{};
        const auto claim = row[6] ? std::optional(ceil_ms(row[6])) : std::nullopt;
        auto verdict = judge_shared(r, holders, permits, claim, kSharedRecheck);
        if (verdict.busy) return std::move(*verdict.busy);
        if (const LockInfo* mine = verdict.reenter) {
          connection.execute(reenter_shared_, {ttl, ttl, r.key, static_cast<std::int64_t>(mine->token)});
          return backend::Acquired{mine->token, mine->hold_count + 1};
        }
        const auto token = static_cast<std::int64_t>(key.token + 1);
        connection.execute(add_holder_, {r.key, token, r.owner, static_cast<std::int64_t>(r.permits), ttl});
        if (claim) carry_claim(connection, r.key, key.token, key.token + 1);
        connection.execute(mark_shared_, {ttl, ttl, token, bell, token, bell, token, r.key});
        return backend::Acquired{key.token + 1, 1};
      });
    });
    if (result) return *result;
    backend_.with_retries(r.key, [&] { return connection.execute(add_row_, {r.key}); });
  }
}

std::vector<LockInfo> LeaseShared::holders(Connection& connection, std::string_view key) {
  const auto rows = backend_.with_retries(key, [&] { return connection.query(holders_, {key}); });
  std::vector<LockInfo> out;
  for (const Row& row : rows) {
    out.push_back(ModeBackend::info(std::string(key), row, 0));
    out.back().mode = LockMode::shared;
  }
  return out;
}

std::vector<LockInfo> LeaseShared::locked_holders(Connection& connection, std::string_view key,
                                                  std::optional<std::uint32_t>* permits) {
  std::vector<LockInfo> out;
  for (const Row& row : connection.query(locked_holders_, {key})) {
    out.push_back(ModeBackend::info(std::string(key), row, 0));
    out.back().mode = LockMode::shared;
    if (permits) *permits = static_cast<std::uint32_t>(to_u64(row[5]));
  }
  return out;
}

bool LeaseShared::renew(Connection& connection, const backend::LeaseRef& lease, std::chrono::milliseconds ttl) {
  const std::int64_t us = ttl_us(ttl);
  return backend_.with_retries(lease.key, [&] {
    return connection.execute(renew_, {us, us, lease.key, lease.owner, static_cast<std::int64_t>(lease.token)});
  }).affected > 0;
}

LeaseShared::Released LeaseShared::release(Connection& connection, const backend::LeaseRef& lease) {
  const std::string bell = backend_.bell_name(lease.key);
  const auto token = static_cast<std::int64_t>(lease.token);
  return backend_.with_retries(lease.key, [&] {
    return ModeBackend::in_transaction(connection, [&]() -> Released {
      const auto rows = connection.query(find_hold_, {bell, lease.key, lease.owner, token});
      if (rows.empty()) return {};
      const auto holds = static_cast<std::uint32_t>(to_u64(rows[0][0]));
      if (holds > 1) {
        connection.execute(drop_hold_, {lease.key, token});
        return {true, holds - 1};
      }
      connection.execute(delete_hold_, {lease.key, token});
      settle(connection, lease.key);
      // An evicted holder's release acknowledges its loss: its hold ends, and it was not ours.
      return {true, holds == 0 ? std::nullopt : std::optional<std::uint32_t>(0)};
    });
  });
}

std::optional<std::vector<LockInfo>> LeaseShared::force_release(Connection& connection, std::string_view key,
                                                                Eviction eviction, std::optional<std::uint64_t> token) {
  return backend_.with_retries(key, [&] {
    return ModeBackend::in_transaction(connection, [&]() -> std::optional<std::vector<LockInfo>> {
      const auto held = connection.query(held_shared_, {key});
      if (held.empty() || held[0][0] != std::optional<std::string>("1")) return std::nullopt;
      auto evicted = locked_holders(connection, key);
      std::erase_if(evicted, [&](const LockInfo& h) { return token && h.token != *token; });
      for (const LockInfo& h : evicted) {
        const auto t = static_cast<std::int64_t>(h.token);
        connection.execute(eviction == Eviction::immediate ? delete_hold_ : evict_hold_, {key, t});
      }
      if (eviction == Eviction::immediate && !evicted.empty()) settle(connection, key);
      return evicted;
    });
  });
}

void LeaseShared::drop_holder_lock(Connection& connection, const backend::LeaseRef& lease) {
  const std::string bell = backend_.bell_name(lease.key);
  backend_.with_retries(lease.key, [&] {
    return connection.query(drop_holder_lock_, {std::string_view(bell), static_cast<std::int64_t>(lease.token)});
  });
}

void LeaseShared::settle(Connection& connection, std::string_view key) { connection.execute(settle_, {key}); }

void LeaseShared::remove_idle(Connection& connection, std::string_view cutoff) {
  connection.execute(idle_holds_, {cutoff});
  connection.execute(idle_claims_, {cutoff});
}

}  // namespace dlock::backends::mysql
