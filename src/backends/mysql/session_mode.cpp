// mysql:// session mode: the lock is the key's GET_LOCK, held by a database connection of its
// own (seed 002). It dies with that connection, so it needs no lease: a crashed holder frees
// the key at once, and a holder whose connection failed learns of the loss at its next renew.
// The lock table keeps what GET_LOCK cannot: the owner, the hold count and a fencing token,
// and which connection holds the lock (session_id), so every check of a row is also a check
// that its session is still alive.
//
// A holder evicted with a lock delay keeps its row (owner, token, expiry) with hold_count 0,
// and its connection keeps the GET_LOCK: waiters sleep on it as before, and the holder's
// release frees both. The row alone keeps the key closed (no acquire takes it, whoever holds
// the GET_LOCK) until that release or the expiry by the server's clock, so the key stays
// closed even when the holder's connection ends meanwhile: then the first waiter the server
// grants the GET_LOCK keeps it, the others sleeping on it, and looks at the row now and then.
// A holder whose connection outlives its expiry without releasing is ended (KILL) by the
// first acquire that finds it so.

#include <mysqld_error.h>

#include <thread>

#include "backends/mysql/common.hpp"
#include "backends/mysql/session_shared.hpp"
#include "backends/mysql/session_sql.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::mysql {
namespace {

// Bits of a token below its epoch: 2^40 acquisitions of a key per server run.
constexpr int kEpochShift = 40;
// How long a woken waiter's takeover (it holds the bell, the row is not yet written) is
// reported to last.
constexpr std::chrono::milliseconds kHandoffRecheck{50};
// How soon a writer refused by a readers' claim looks again: by then the readers who claimed
// the key hold it, and it waits for their locks instead.
constexpr std::chrono::milliseconds kReadersEnterRecheck{2};

class SessionBackend final : public ModeBackend {
 public:
  explicit SessionBackend(Settings settings)
      : ModeBackend(std::move(settings)),
        sql_(settings_.table, settings_.lock_delay),
        shared_(*this, settings_.table, settings_.lock_delay,
                {[this](Connection& c, std::string_view key, std::uint64_t session) { kill_session(c, key, session); },
                 [this](Connection& c) { return start_epoch(c); }}) {
    auto connection = take();
    ensure_lock_table(*connection, true);
    watch_lock_connections();
  }

  // A lock is its holder's GET_LOCK: it ends with the holder's connection, not its lease; with
  // lock_delay the key stays closed until that lease ends.
  backend::Capabilities capabilities() const noexcept override {
    return {.spans_processes = true,
            .frees_when_holder_dies = !settings_.lock_delay,
            .lease_is_the_session = true,
            .records_acquisition_time = true,
            .shared_holders = true};
  }

  backend::AcquireResult attempt(const backend::AcquireRequest& request, DoorbellChannel* channel) override {
    for (;;) {
      auto result = attempt_once(request, channel);
      if (!result) continue;
      // A waiting writer renews its claim at least every half claim (backend.hpp).
      auto* busy = std::get_if<backend::Busy>(&*result);
      if (busy && request.waiting && request.mode == LockMode::exclusive) {
        busy->retry_within = std::min<std::chrono::milliseconds>(busy->retry_within, backend::kWriterClaim / 2);
      }
      return *result;
    }
  }

  // One attempt; nothing when it must be made again (the server had restarted: a new epoch
  // began).
  std::optional<backend::AcquireResult> attempt_once(const backend::AcquireRequest& request, DoorbellChannel* channel) {
    const std::string bell = bell_name(request.key);
    // A new lock gets a connection of its own: ending that connection (force-release) must
    // not end other locks.
    Attempt attempt = attempt_for(request, channel, true);
    Connection* connection = attempt.connection;
    if (request.mode == LockMode::shared) return attempt_shared(request, *connection);
    const std::int64_t known = remembered(request.key, request.owner) == connection->serial() ? 1 : 0;
    const std::int64_t ttl = ttl_us(request.ttl);
    const auto look = [&] {
      return with_retries(request.key, [&] {
        return connection->query(sql_.conflict, {bell, bell, bell, request.key, bell, bell, request.key});
      });
    };
    Outcome outcome;
    std::vector<Row> rows;  // the key's row, once looked at
    try {
      if (!known) {
        outcome = with_retries(request.key, [&] {
          return connection->execute(sql_.take,
                                     {request.owner, ttl, request.key, bell, bell, bell, bell, request.key, bell});
        });
        if (outcome.affected == 1) {
          if (attempt.channel) attempt.channel->bell_settled();
          remember(request.key, request.owner, connection->serial(), outcome.insert_id);
          return backend::Acquired{outcome.insert_id, 1};
        }
        // Not taken: its row says why, and only without one can `acquire` do better.
        rows = look();
      }
      if (rows.empty()) {
        const auto acquire = [&] {
          return connection->execute(sql_.acquire, {request.key, request.owner, ttl, bell, bell, bell, request.key, bell,
                                                    known, known, known, known, known, known, known, known, known,
                                                    known});
        };
        outcome = with_retries(request.key, [&] {
          try {
            return acquire();
          } catch (const SqlError& e) {
            if (e.code != ER_RECORD_FILE_FULL) throw;
          }
          // The memory table is full: make room by removing released rows, once.
          remove_idle(*connection);
          return acquire();
        });
      }
    } catch (...) {
      // A lock taken by a statement that then failed would block the key until this
      // connection ends.
      if (!connection->broken() && !known) drop_bell(*connection, bell);
      if (attempt.channel) attempt.channel->bell_settled();
      throw;
    }
    if (attempt.channel) attempt.channel->bell_settled();
    if (rows.empty()) {
      if (outcome.affected == 1 || (outcome.affected == 2 && outcome.insert_id != 0)) {
        remember(request.key, request.owner, connection->serial(), outcome.insert_id);
        return backend::Acquired{outcome.insert_id, 1};
      }
      if (outcome.affected == 2) {  // a re-entry on this connection
        const auto held = with_retries(request.key, [&] {
          return connection->query(sql_.reentered, {request.key, request.owner});
        });
        if (held.empty()) throw BackendError("a re-entry of '" + std::string(request.key) + "' left no row", kName);
        return backend::Acquired{to_u64(held[0][0]), static_cast<std::uint32_t>(to_u64(held[0][1]))};
      }
      // Another connection holds the lock, or the row is closed.
      rows = look();
    }
    const auto yes = std::optional<std::string>("1");
    const bool live = !rows.empty() && rows[0][5] == yes;
    if (!rows.empty() && rows[0][6] == yes) {
      // Evicted with a lock delay. This session took the lock, whose holder's connection ended,
      // for nothing: a waiter keeps it (the others sleep on it); anyone else gives it back.
      if (rows[0][7] == yes && !known) {
        if (attempt.channel) {
          attempt.channel->guard_bell();
        } else {
          drop_bell(*connection, bell);
        }
      }
      LockInfo holder = info(std::string(request.key), rows[0], 0);
      if (holder.owner == kSharedOwner) return shared_.writer_refused(*connection, request, holder.token);
      const auto left = holder.ttl_left;
      return backend::Busy{{std::move(holder)}, left};
    }
    if (!live) {
      if (!rows.empty() && rows[0][9]) {
        // Readers have claimed the free key: the GET_LOCK this session took goes to them. A
        // waiting writer claims the key for after them (the readers who waited pass its claim,
        // new ones do not) and looks again soon for the holders to wait for.
        if (rows[0][7] == yes && !known) drop_bell(*connection, bell);
        auto left = ceil_ms(rows[0][9]);
        if (request.waiting) {
          shared_.claim_for_writer(*connection, request.key, to_u64(rows[0][1]));
          left = std::min(left, kReadersEnterRecheck);
        }
        return backend::Busy{{}, left};
      }
      // The server restarted (its memory tables are empty): a new epoch first. Or the key's
      // holder has the lock but has not written the row yet (a woken waiter taking over), or a
      // shared step was looking at the key (`take`), which a woken waiter's bell goes on to.
      if (start_epoch(*connection)) return std::nullopt;
      if (!rows.empty() && rows[0][7] == yes && !known) drop_bell(*connection, bell);
      return backend::Busy{{}, kHandoffRecheck};
    }
    LockInfo holder = info(std::string(request.key), rows[0], 0);
    if (holder.evicted) {
      // Evicted, its lease over, and its connection still holds the lock: end it. Waiters get
      // the lock from the server once the session is gone.
      kill_session(*connection, request.key, to_u64(rows[0][8]));
      return backend::Busy{{std::move(holder)}, kHandoffRecheck};
    }
    if (holder.owner == request.owner) {
      const auto token = static_cast<std::int64_t>(holder.token);
      const auto again = with_retries(request.key, [&] {
        return connection->execute(sql_.reenter_elsewhere, {ttl, request.key, request.owner, token, bell});
      });
      if (again.affected == 1) return backend::Acquired{holder.token, static_cast<std::uint32_t>(again.insert_id)};
    }
    const auto left = holder.ttl_left;
    return backend::Busy{{std::move(holder)}, left};
  }

  // A shared attempt on `connection`, which keeps a new holder's lock. A live exclusive hold of
  // the request's owner is re-entered (a writer may also read).
  backend::AcquireResult attempt_shared(const backend::AcquireRequest& request, Connection& connection) {
    auto result = shared_.acquire(connection, request);
    if (const auto* acquired = std::get_if<backend::Acquired>(&result)) {
      if (acquired->hold_count == 1) remember(request.key, request.owner, connection.serial(), acquired->token);
      return result;
    }
    const auto& busy = std::get<backend::Busy>(result);
    if (busy.holders.size() != 1 || busy.holders[0].mode != LockMode::exclusive ||
        busy.holders[0].owner != request.owner || busy.holders[0].hold_count == 0) {
      return result;
    }
    const LockInfo& mine = busy.holders[0];
    const auto again = with_retries(request.key, [&] {
      return connection.execute(sql_.reenter_elsewhere, {ttl_us(request.ttl), request.key, request.owner,
                                                         static_cast<std::int64_t>(mine.token), bell_name(request.key)});
    });
    if (again.affected == 1) return backend::Acquired{mine.token, static_cast<std::uint32_t>(again.insert_id)};
    return result;
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    const std::string bell = bell_name(lease.key);
    auto connection = take();
    const auto outcome = with_retries(lease.key, [&] {
      return connection->execute(sql_.renew,
                                 {ttl_us(ttl), lease.key, lease.owner, static_cast<std::int64_t>(lease.token), bell});
    });
    return outcome.affected == 1 || shared_.renew(*connection, lease, ttl);
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    const std::string bell = bell_name(lease.key);
    auto connection = take_for(lease.key, lease.owner, lease.token);
    const bool on_holder = remembered(lease.key, lease.owner, lease.token) == connection->serial();
    const auto token = static_cast<std::int64_t>(lease.token);
    if (on_holder && with_retries(lease.key, [&] {
                       return connection->execute(sql_.free, {bell, lease.key, lease.owner, token, bell});
                     }).affected == 1) {
      forget(lease.key, lease.owner, lease.token);
      return 0u;
    }
    const auto outcome = with_retries(lease.key, [&] {
      return connection->execute(sql_.release, {bell, bell, bell, bell, bell, lease.key, lease.owner, token, bell});
    });
    const bool evicted = outcome.affected == 1 && outcome.insert_id == kEvictedRelease;
    if (outcome.affected == 1 && outcome.insert_id > 0 && !evicted) return static_cast<std::uint32_t>(outcome.insert_id);
    if (outcome.affected != 1) {
      if (const auto shared = shared_.release(*connection, lease); shared.found) {
        if (shared.left.value_or(0) == 0) forget(lease.key, lease.owner, lease.token);
        return shared.left;
      }
    }
    forget(lease.key, lease.owner, lease.token);
    if (outcome.affected != 1) {
      // Lost. The holder's connection still has the lock when its lease ran out after an
      // eviction: it would keep the key, and go back to the pool with it.
      with_retries(lease.key, [&] {
        return connection->query(sql_.drop_expired, {bell, lease.key, lease.owner, token, bell});
      });
      return std::nullopt;
    }
    // The last hold, released from a connection other than the holder's (a shared explicit
    // owner, or the holder's connection ended after an eviction): the lock ends with the
    // holder's connection, if it still has it.
    if (!on_holder) end_orphaned_session(*connection, lease.key, token, bell);
    if (evicted) return std::nullopt;  // freed, as its last release
    return 0u;
  }

  std::vector<LockInfo> inspect(std::string_view key) override {
    auto connection = take();
    auto holders = inspect_on(*connection, key, sql_.inspect, bell_name(key));
    return holders.empty() ? shared_.holders(*connection, key) : holders;
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    // Keep the rows whose session still holds the key's lock, or the shared holder's own.
    const auto yes = std::optional<std::string>("1");
    const auto keep = [&](Connection& c, const Row& row) {
      // Evicted, or with lock_delay any holder: its lease counts, not its session.
      if (row[3] == std::optional<std::string>("0")) return true;
      if (settings_.lock_delay && row[7] == yes) return true;
      std::string lock = bell_name(row[0].value_or(""));
      if (row[8] == yes) {
        lock += ':';
        lock += row[2].value_or("");
      }
      const auto holder = c.query(sql_.session_of, {lock});
      return !holder.empty() && holder[0][0] == row[6];
    };
    return list_page(prefix, after, limit, shared_.list_bounded(), shared_.list_open(), keep, 8);
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    if (auto shared = shared_.force_release(*take(), key, eviction, token)) return *shared;
    const std::string bell = bell_name(key);
    // With a lock delay the holder's connection keeps the lock (waiters sleep on it) until its
    // release; at once, it is ended.
    if (eviction == Eviction::delayed) return evict(key, token, sql_.inspect, sql_.evict, bell);
    return evict(key, token, sql_.inspect, sql_.force_release, bell,
                 [&](Connection& connection, std::int64_t held) {
                   end_orphaned_session(connection, key, held, bell);
                 });
  }

  std::size_t collect_idle() override {
    auto connection = take();
    return with_retries({}, [&] { return remove_idle(*connection); });
  }

 private:
  std::size_t remove_idle(Connection& connection) {
    connection.execute(sql_.raise_floor, {});
    shared_.remove_idle(connection);
    return static_cast<std::size_t>(connection.execute(sql_.delete_idle, {}).affected);
  }

  // Tokens are the epoch times 2^40 plus a count within it. The memory tables that hold the
  // keys' state and the token floor are empty after a restart; the epoch, raised (durably, in
  // the `_seq` table) once per server run, keeps tokens rising across restarts. True when
  // this call set the floor; false when it was there.
  bool start_epoch(Connection& connection) {
    if (!with_retries({}, [&] { return connection.query(sql_.has_floor, {}); }).empty()) return false;
    const std::uint64_t epoch = with_retries({}, [&] { return connection.execute(sql_.raise_epoch, {}); }).insert_id;
    const auto first = static_cast<std::int64_t>(epoch << kEpochShift);
    with_retries({}, [&] { return connection.execute(sql_.start_floor, {first}); });  // unless another client's won
    return true;
  }

  void drop_bell(Connection& connection, const std::string& bell) noexcept {
    try {
      connection.query(sql_.drop_bell, {bell, bell});
    } catch (...) {
      // The session is gone, and its locks with it.
    }
  }

  // Ends connection `session`, which holds the key's lock (and no other: one per connection).
  void kill_session(Connection& connection, std::string_view key, std::uint64_t session) {
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
  }

  // A freed row whose lock is still held by the connection it names: end that connection,
  // then mark the row settled.
  void end_orphaned_session(Connection& connection, std::string_view key, std::int64_t token, const std::string& bell) {
    const auto rows = with_retries(key, [&] { return connection.query(sql_.orphaned, {key, token, bell}); });
    if (rows.empty()) return;  // released by its own connection, or that connection is gone
    const std::uint64_t session = to_u64(rows[0][0]);
    if (session == connection.id()) {
      drop_bell(connection, bell);
    } else {
      kill_session(connection, key, session);
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
  SessionShared shared_;
};

}  // namespace

std::shared_ptr<backend::Backend> make_session_backend(Settings settings) {
  return std::make_shared<SessionBackend>(std::move(settings));
}

}  // namespace dlock::backends::mysql
