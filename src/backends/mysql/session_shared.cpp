// mysql:// session mode's shared holds (session_shared.hpp).

#include "backends/mysql/session_shared.hpp"

#include <algorithm>

#include "dlock/errors.hpp"

namespace dlock::backends::mysql {
namespace {

// How long a shared step waits for another one of the same key to end.
constexpr std::int64_t kGateWaitS = 5;
// What a holder whose renewals are overdue reports as its time left (session_sql.cpp).
constexpr const char* kOverdueUs = "1000000";

const std::string kNow = "UTC_TIMESTAMP(6)";

std::string shared_owner() { return std::string("'").append(kSharedOwner).append("'"); }

// A shared holder `s` is live while its session holds its lock (the bell parameter's, plus its
// token), or, evicted with a lock delay or with lock_delay, until its lease ends.
std::string live(bool lock_delay, const std::string& s = "s.") {
  return "((" + s + "hold_count > 0 AND IS_USED_LOCK(CONCAT(?, ':', " + s + "token)) <=> " + s + "session_id) OR ((" + s +
         "hold_count = 0 OR " + (lock_delay ? "1" : "0") + ") AND " + s + "expires_at > " + kNow + "))";
}

std::string time_left(const std::string& expires) {
  return "IF(" + expires + " > " + kNow + ", TIMESTAMPDIFF(MICROSECOND, " + kNow + ", " + expires + "), " + kOverdueUs +
         ")";
}

}  // namespace

std::string SessionShared::stepping_sql() { return "IS_USED_LOCK(CONCAT(?, ':gate')) IS NOT NULL"; }

std::string SessionShared::busy_sql(const std::string& table, bool lock_delay) {
  return "(" + stepping_sql() + " OR EXISTS (SELECT 1 FROM `" + table + "_holders` AS s WHERE s.name = ? AND " +
         live(lock_delay) + "))";
}

std::string SessionShared::held_sql(const std::string& table, bool lock_delay) {
  return "(owner = " + shared_owner() + " AND " + busy_sql(table, lock_delay) + ")";
}

SessionShared::SessionShared(ModeBackend& backend, const std::string& table, bool lock_delay, Hooks hooks)
    : SharedHolds(backend, table, table + "_session"), hooks_(std::move(hooks)) {
  const std::string t = "`" + table + "_session`";
  const std::string h = "`" + table + "_holders`";
  const std::string c = "`" + table + "_claim`";
  const std::string floor = "`" + table + "_epoch`";
  const std::string shared = shared_owner();
  const std::string until = " + INTERVAL ? MICROSECOND";
  const std::string delay = lock_delay ? "1" : "0";
  // Parameters: bell, seconds; bell.
  gate_ = "SELECT GET_LOCK(CONCAT(?, ':gate'), ?)";
  ungate_ = "SELECT RELEASE_LOCK(CONCAT(?, ':gate'))";
  // A live exclusive holder (session_mode.cpp's `held`). Parameter: bell.
  const std::string exclusive = "(owner <> '' AND owner <> " + shared + " AND ((hold_count > 0 AND session_id = "
                                "IS_USED_LOCK(?)) OR ((hold_count = 0 OR " + delay + ") AND expires_at > " + kNow + ")))";
  // The key's row as a holder (owner, token, holds, left, held for), whether it is a live
  // exclusive holder's, whether it is an evicted holder's whose lease ran out but whose session
  // still holds the bell (which the next acquire ends), its session, and a live claim's
  // microseconds left (NULL for none). Parameters: bell, bell, key.
  look_ = "SELECT owner, token, hold_count, " + time_left("expires_at") + ", TIMESTAMPDIFF(MICROSECOND, acquired_at, " +
          kNow + "), " + exclusive + ", (owner <> '' AND owner <> " + shared + " AND hold_count = 0 AND expires_at <= " +
          kNow + " AND session_id = IS_USED_LOCK(?)), session_id, (SELECT TIMESTAMPDIFF(MICROSECOND, " + kNow +
          ", c.expires_at) FROM " + c + " AS c WHERE c.name = t.name AND c.token >= t.token AND c.expires_at > " + kNow +
          ") FROM " + t + " AS t WHERE name = ?";
  // A free row for a new key, its token the floor of this epoch. Parameter: key.
  add_row_ = "INSERT IGNORE INTO " + t + " (name, owner, token, hold_count, acquired_at, expires_at, session_id)"
             " SELECT ?, '', v, 0, " + kNow + ", " + kNow + ", 0 FROM " + floor + " WHERE id = 0";
  // Parameters: key, bell.
  drop_dead_ = "DELETE FROM " + h + " WHERE name = ? AND NOT " + live(lock_delay, "");
  // (owner, token, holds, left, held for, permits, the session holding its lock or 0).
  // Parameters: bell, key, bell.
  holders_ = "SELECT s.owner, s.token, s.hold_count, " + time_left("s.expires_at") +
             ", TIMESTAMPDIFF(MICROSECOND, s.acquired_at, " + kNow + "), s.permits,"
             " IF(IS_USED_LOCK(CONCAT(?, ':', s.token)) <=> s.session_id, s.session_id, 0) FROM " + h +
             " AS s WHERE s.name = ? AND " + live(lock_delay) + " ORDER BY s.token";
  // Parameters: ttl, key, token. A re-entry never shortens a lease.
  reenter_shared_ = "UPDATE " + h + " SET hold_count = hold_count + 1, expires_at = GREATEST(expires_at, " + kNow + until +
                    ") WHERE name = ? AND token = ?";
  // The key's next token, unless a live exclusive holder took the key meanwhile (the row's
  // `expires_at` stays now: the holders' leases are theirs), or a writer claimed it since the
  // step looked (a reader that waited behind a writer passes a claim). A grant ends a readers'
  // claim. Parameters: key, bell, waited behind.
  mark_ = "UPDATE " + t + " SET token = LAST_INSERT_ID(token + 1), hold_count = 1, acquired_at = " + kNow +
          ", expires_at = " + kNow + ", session_id = 0, owner = " + shared + ", readers_until = " + kNow +
          " WHERE name = ? AND NOT " + exclusive + " AND (? <> 0 OR NOT EXISTS (SELECT 1 FROM " + c +
          " AS c WHERE c.name = " + t + ".name AND c.token >= " + t + ".token AND c.expires_at > " + kNow + "))";
  // A waiting reader's claim (backend.hpp), on the token of the exclusive holder it found, or
  // of one that took the key back since (no reader did). Parameters: claim, key, token.
  claim_readers_ = "UPDATE " + t + " SET readers_until = " + kNow + until + " WHERE name = ? AND token >= ? AND owner <> " +
                   shared;
  // Parameters: key, token, owner, permits, ttl, bell, token.
  add_holder_ = "INSERT INTO " + h + " (name, token, owner, hold_count, permits, acquired_at, expires_at, session_id)"
                " SELECT ?, ?, ?, 1, ?, " + kNow + ", " + kNow + until + ", CONNECTION_ID() FROM DUAL"
                " WHERE GET_LOCK(CONCAT(?, ':', ?), 0) = 1";
  // Parameters: ttl, key, owner, token, bell.
  renew_ = "UPDATE " + h + " SET expires_at = " + kNow + until + " WHERE name = ? AND owner = ? AND token = ?"
           " AND hold_count > 0 AND IS_USED_LOCK(CONCAT(?, ':', token)) <=> session_id";
  // Parameters: key, owner, token, bell.
  find_hold_ = "SELECT s.hold_count FROM " + h + " AS s WHERE s.name = ? AND s.owner = ? AND s.token = ? AND " +
               live(lock_delay);
  // Parameters of the three: key, token.
  drop_hold_ = "UPDATE " + h + " SET hold_count = hold_count - 1 WHERE name = ? AND token = ?";
  delete_hold_ = "DELETE FROM " + h + " WHERE name = ? AND token = ?";
  evict_hold_ = "UPDATE " + h + " SET hold_count = 0 WHERE name = ? AND token = ?";
  // The holder's lock, when this session has it. Parameters: bell, token, bell, token.
  unlock_holder_ = "SELECT IF(IS_USED_LOCK(CONCAT(?, ':', ?)) <=> CONNECTION_ID(), RELEASE_LOCK(CONCAT(?, ':', ?)), 0)";
  // Frees the row once no holder is live. Parameters: key, key, bell.
  settle_ = "UPDATE " + t + " SET owner = '', hold_count = 0, expires_at = " + kNow + " WHERE name = ? AND owner = " +
            shared + " AND NOT EXISTS (SELECT 1 FROM " + h + " AS s WHERE s.name = ? AND " + live(lock_delay) + ")";
  // Parameter: key.
  held_shared_ = "SELECT owner = " + shared + " FROM " + t + " WHERE name = ?";
  // A page of keys (the inner LIMIT), each with its exclusive holder or its shared ones: (key,
  // owner, token, holds, left, held for, session, unexpired, shared). Their sessions are
  // checked by the caller, which can name the locks.
  const auto list = [&](const std::string& range) {
    const auto either = [](const std::string& column) { return "IF(k.sh, s." + column + ", k." + column + ")"; };
    return "SELECT k.name, " + either("owner") + ", " + either("token") + ", " + either("hold_count") + ", " +
           time_left(either("expires_at")) + ", TIMESTAMPDIFF(MICROSECOND, " + either("acquired_at") + ", " + kNow +
           "), " + either("session_id") + ", " + either("expires_at") + " > " + kNow +
           ", k.sh FROM (SELECT name, owner, token, hold_count, acquired_at, expires_at, session_id, owner = " + shared +
           " AS sh FROM " + t + " WHERE " + range + " AND name <> ? AND owner <> '' AND (hold_count > 0 OR expires_at > " +
           kNow + ") ORDER BY name LIMIT ?) AS k LEFT JOIN " + h +
           " AS s ON k.sh AND s.name = k.name AND (s.hold_count > 0 OR s.expires_at > " + kNow +
           ") WHERE NOT k.sh OR s.token IS NOT NULL ORDER BY k.name, s.token";
  };
  list_bounded_ = list("name >= ? AND name < ?");
  list_open_ = list("name >= ?");
  idle_holders_ = "DELETE FROM " + h + " WHERE name NOT IN (SELECT name FROM " + t + " WHERE owner = " + shared + ")";
}

template <class F>
auto SessionShared::gated(Connection& connection, const std::string& bell, F&& step) -> std::optional<decltype(step())> {
  const auto got = backend_.with_retries({}, [&] { return connection.query(gate_, {bell, kGateWaitS}); });
  if (got.empty() || got[0][0] != std::optional<std::string>("1")) return std::nullopt;
  try {
    auto result = step();
    connection.query(ungate_, {bell});
    return result;
  } catch (...) {
    try {
      if (!connection.broken()) connection.query(ungate_, {bell});
    } catch (...) {
      // The session is gone, and the gate with it.
    }
    throw;
  }
}

backend::AcquireResult SessionShared::acquire(Connection& connection, const backend::AcquireRequest& r) {
  const std::string bell = backend_.bell_name(r.key);
  const std::int64_t ttl = ttl_us(r.ttl);
  const auto run = [&](auto&& statement) { return backend_.with_retries(r.key, statement); };
  auto result = gated(connection, bell, [&]() -> backend::AcquireResult {
    for (;;) {
      const auto rows = run([&] { return connection.query(look_, {bell, bell, r.key}); });
      if (rows.empty()) {
        if (run([&] { return connection.execute(add_row_, {r.key}); }).affected == 0) hooks_.start_epoch(connection);
        continue;
      }
      const Row& row = rows[0];
      const auto yes = std::optional<std::string>("1");
      LockInfo key = ModeBackend::info(std::string(r.key), row, 0);
      // Refused by an exclusive holder (whose token is `key.token` or above): a waiting reader
      // claims the key, but not from a writer that may also read.
      const auto claim_readers = [&] {
        if (!r.waiting || key.owner == r.owner) return false;
        run([&] {
          return connection.execute(claim_readers_,
                                    {ttl_us(backend::kWriterClaim), r.key, static_cast<std::int64_t>(key.token)});
        });
        return true;
      };
      if (row[6] == yes) {
        // Evicted, its lease over, its session still holding the bell: end it, as an exclusive
        // acquire does.
        hooks_.kill(connection, r.key, to_u64(row[7]));
        return backend::Busy{{std::move(key)}, kSharedRecheck};
      }
      if (row[5] == yes) {
        auto left = key.ttl_left;
        if (claim_readers()) left = std::min<std::chrono::milliseconds>(left, backend::kWriterClaim / 2);
        return backend::Busy{{std::move(key)}, left};
      }
      run([&] { return connection.execute(drop_dead_, {r.key, bell}); });
      std::optional<std::uint32_t> permits;
      auto holders = key.owner == kSharedOwner ? read_holders(connection, r.key, bell, &permits) : std::vector<LockInfo>{};
      const auto claim = row[8] ? std::optional(ceil_ms(row[8])) : std::nullopt;
      auto verdict = judge_shared(r, holders, permits, claim, kSharedRecheck);
      if (verdict.busy) return std::move(*verdict.busy);
      if (const LockInfo* mine = verdict.reenter) {
        run([&] { return connection.execute(reenter_shared_, {ttl, r.key, static_cast<std::int64_t>(mine->token)}); });
        return backend::Acquired{mine->token, mine->hold_count + 1};
      }
      const auto marked = run([&] {
        return connection.execute(mark_, {r.key, bell, static_cast<std::int64_t>(r.waited_behind)});
      });
      if (marked.affected != 1) {  // an exclusive holder, or a writer's claim, came first
        claim_readers();
        return backend::Busy{{}, kSharedRecheck};
      }
      const auto token = static_cast<std::int64_t>(marked.insert_id);
      if (claim) {
        run([&] {
          carry_claim(connection, r.key, marked.insert_id - 1, marked.insert_id);
          return true;
        });
      }
      const auto added = run([&] {
        return connection.execute(add_holder_,
                                  {r.key, token, r.owner, static_cast<std::int64_t>(r.permits), ttl, bell, token});
      });
      if (added.affected != 1) {
        throw BackendError("the lock of a new shared holder of '" + std::string(r.key) + "' was taken", kName,
                           std::string(r.key), true);
      }
      return backend::Acquired{marked.insert_id, 1};
    }
  });
  return result ? *result : backend::Busy{{}, kSharedRecheck};
}

std::vector<LockInfo> SessionShared::holders(Connection& connection, std::string_view key) {
  const std::string bell = backend_.bell_name(key);
  return backend_.with_retries(key, [&] { return read_holders(connection, key, bell); });
}

std::vector<LockInfo> SessionShared::read_holders(Connection& connection, std::string_view key, const std::string& bell,
                                                  std::optional<std::uint32_t>* permits,
                                                  std::vector<std::uint64_t>* sessions) {
  std::vector<LockInfo> out;
  for (const Row& row : connection.query(holders_, {bell, key, bell})) {
    out.push_back(ModeBackend::info(std::string(key), row, 0));
    out.back().mode = LockMode::shared;
    if (permits) *permits = static_cast<std::uint32_t>(to_u64(row[5]));
    if (sessions) sessions->push_back(to_u64(row[6]));
  }
  return out;
}

bool SessionShared::renew(Connection& connection, const backend::LeaseRef& lease, std::chrono::milliseconds ttl) {
  const std::string bell = backend_.bell_name(lease.key);
  return backend_.with_retries(lease.key, [&] {
    return connection.execute(renew_,
                              {ttl_us(ttl), lease.key, lease.owner, static_cast<std::int64_t>(lease.token), bell});
  }).affected == 1;
}

SessionShared::Released SessionShared::release(Connection& connection, const backend::LeaseRef& lease) {
  const std::string bell = backend_.bell_name(lease.key);
  const auto token = static_cast<std::int64_t>(lease.token);
  const auto run = [&](auto&& statement) { return backend_.with_retries(lease.key, statement); };
  auto released = gated(connection, bell, [&]() -> Released {
    const auto rows = run([&] { return connection.query(find_hold_, {lease.key, lease.owner, token, bell}); });
    if (rows.empty()) return {};
    const auto holds = static_cast<std::uint32_t>(to_u64(rows[0][0]));
    if (holds > 1) {
      run([&] { return connection.execute(drop_hold_, {lease.key, token}); });
      return {true, holds - 1};
    }
    run([&] { return connection.execute(delete_hold_, {lease.key, token}); });
    run([&] { return connection.query(unlock_holder_, {bell, token, bell, token}); });
    run([&] { return connection.execute(settle_, {lease.key, lease.key, bell}); });
    // An evicted holder's release acknowledges its loss: its hold ends, and it was not ours.
    return {true, holds == 0 ? std::nullopt : std::optional<std::uint32_t>(0)};
  });
  if (!released) {
    throw BackendError("'" + std::string(lease.key) + "' stayed busy with other shared holders' steps", kName,
                       std::string(lease.key), true);
  }
  return *released;
}

std::optional<std::vector<LockInfo>> SessionShared::force_release(Connection& connection, std::string_view key,
                                                                  Eviction eviction,
                                                                  std::optional<std::uint64_t> token) {
  const std::string bell = backend_.bell_name(key);
  const auto run = [&](auto&& statement) { return backend_.with_retries(key, statement); };
  auto evicted = gated(connection, bell, [&]() -> std::optional<std::vector<LockInfo>> {
    const auto held = run([&] { return connection.query(held_shared_, {key}); });
    if (held.empty() || held[0][0] != std::optional<std::string>("1")) return std::nullopt;
    std::vector<std::uint64_t> sessions;
    auto holders = run([&] { return read_holders(connection, key, bell, nullptr, &sessions); });
    std::vector<LockInfo> out;
    for (std::size_t i = 0; i < holders.size(); ++i) {
      if (token && holders[i].token != *token) continue;
      const auto t = static_cast<std::int64_t>(holders[i].token);
      run([&] { return connection.execute(eviction == Eviction::immediate ? delete_hold_ : evict_hold_, {key, t}); });
      // Nothing else can take a session's lock from it: this session gives its own back.
      if (eviction == Eviction::immediate && sessions[i] == connection.id()) {
        run([&] { return connection.query(unlock_holder_, {bell, t, bell, t}); });
      } else if (eviction == Eviction::immediate && sessions[i] != 0) {
        hooks_.kill(connection, key, sessions[i]);
      }
      out.push_back(std::move(holders[i]));
    }
    if (eviction == Eviction::immediate && !out.empty()) {
      run([&] { return connection.execute(settle_, {key, key, bell}); });
    }
    return out;
  });
  if (!evicted) {
    throw BackendError("'" + std::string(key) + "' stayed busy with shared holders' steps during force-release", kName,
                       std::string(key), true);
  }
  return *evicted;
}

}  // namespace dlock::backends::mysql
