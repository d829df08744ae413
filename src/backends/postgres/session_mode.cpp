// postgres:// session mode: the lock is a session advisory lock of a connection the holder keeps
// for it, so it ends with that connection: a crashed holder frees the key at once, and a
// holder whose connection ended learns of it at its next renewal. Owner, holds and token live in
// unlogged tables beside it (session_sql.hpp): nothing durable is written per acquisition.
// Waiters wait for the lock itself, queued by the server (session_waiter.hpp). README.md says
// what this costs and where it cannot work (a pooler in transaction mode).

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "backends/postgres/activity.hpp"
#include "backends/postgres/common.hpp"
#include "backends/postgres/session_sql.hpp"
#include "backends/postgres/session_waiter.hpp"
#include "backends/postgres/store.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::postgres {
namespace {

// How soon an attempt looks again at a key busy without a holder to name (being taken over,
// or held under another key whose lock id is the same).
constexpr std::chrono::milliseconds kTakeoverRecheck{50};
// How often a waiter queued for the lock looks at the key anyway (the grant wakes it first).
constexpr std::chrono::milliseconds kQueuedRecheck{1000};

// A lock this client holds: the connection that has the advisory lock, kept out of the pool.
struct Hold {
  explicit Hold(Pool::Lease c) : connection(std::move(c)) {}
  std::mutex mutex;  // one statement at a time on the connection
  Pool::Lease connection;
  std::atomic<std::uint64_t> token = 0;  // changes under `mutex`; read by lookups without it
  std::string pid;  // the server process that took it: a pooler may hand the connection another
};

class SessionBackend final : public backend::Backend {
 public:
  explicit SessionBackend(Settings settings) : store_(std::move(settings)) {}

  std::string_view name() const noexcept override { return kName; }

  backend::Capabilities capabilities() const noexcept override {
    backend::Capabilities c;
    c.spans_processes = true;
    c.frees_when_holder_dies = true;
    c.lease_is_the_session = true;
    c.records_acquisition_time = true;
    return c;
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override {
    std::optional<Pool::Lease> none;
    return attempt(request, none);
  }

  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override {
    return std::make_unique<SessionWaiter>(
        store_.pool(),
        [this](const backend::AcquireRequest& r, std::optional<Pool::Lease>& granted) { return attempt(r, granted); },
        request, session_lock_id(settings_.table, request.key));
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    const std::string token = std::to_string(lease.token);
    if (auto hold = find(lease.key, lease.owner, lease.token)) {
      const std::lock_guard lock(hold->mutex);
      const auto rows = on_hold(*hold, lease, [&](Connection& c) {
        return c.query(sql_.renew, {lease.key, lease.owner, token, ms_text(ttl), std::to_string(c.tag())});
      });
      if (!rows || rows->empty()) return false;
      same_session(*hold, rows->at(0)[1]);
      return true;
    }
    // The owner's hold taken by another client (an owner shared across clients).
    return !store_.query(lease.key, sql_.renew, {lease.key, lease.owner, token, ms_text(ttl), "0"}).empty();
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    const std::string token = std::to_string(lease.token);
    auto hold = find(lease.key, lease.owner, lease.token);
    std::vector<Row> rows;
    if (hold) {
      const std::lock_guard lock(hold->mutex);
      auto freed = on_hold(*hold, lease, [&](Connection& c) {
        return c.query(sql_.free_fast, {lease.key, lease.owner, token, std::to_string(c.tag())});
      });
      if (!freed) return std::nullopt;  // the session ended, and the lock with it
      if (!freed->empty()) {
        same_session(*hold, freed->at(0)[1]);
        forget(lease.key, lease.owner);  // the connection goes back to the pool
        return 0u;
      }
      auto answer = on_hold(*hold, lease, [&](Connection& c) {
        return c.query(sql_.free, {lease.key, lease.owner, token, std::to_string(c.tag())});
      });
      if (!answer) return std::nullopt;  // the session ended, and the lock with it
      rows = std::move(*answer);
      if (rows.at(0)[0]) same_session(*hold, rows.at(0)[2]);
    } else {
      rows = store_.query(lease.key, sql_.free, {lease.key, lease.owner, token, "0"});
    }
    const auto& left = rows.at(0)[0];
    if (hold && (!left || *left == "0")) {
      // The last hold gave the lock back: the connection goes back to the pool. A release that
      // found the key no longer ours closes it instead, whatever it may still hold.
      if (!left) hold->connection->discard();
      forget(lease.key, lease.owner);
    }
    if (!left) return std::nullopt;
    return static_cast<std::uint32_t>(to_u64(left));
  }

  std::vector<LockInfo> inspect(std::string_view key) override {
    std::vector<LockInfo> holders;
    for (const auto& row : store_.query(key, sql_.inspect, {key})) holders.push_back(holder_of(row, std::string(key), 0));
    return holders;
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    if (limit == 0) return {};
    const std::string most = std::to_string(std::min<std::size_t>(limit, INT64_MAX - 1) + 1);
    ListPage page;
    for (const auto& row : store_.query({}, sql_.list, {prefix, after, most})) {
      if (page.locks.size() == limit) {
        page.next_after = page.locks.back().key;
        break;
      }
      page.locks.push_back(holder_of(row, row[0].value_or(""), 1));
    }
    return page;
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    const std::optional<std::string> token_text = token ? std::optional(std::to_string(*token)) : std::nullopt;
    const Param token_param = token_text ? Param(*token_text) : std::nullopt;
    std::vector<LockInfo> evicted;
    for (const auto& row :
         store_.query(key, sql_.evict, {key, token_param, eviction == Eviction::immediate ? "t" : "f"})) {
      evicted.push_back(holder_of(row, std::string(key), 0));
    }
    return evicted;
  }

  void ping() override { store_.query({}, "SELECT 1", {}); }

  backend::ActivityLedger* activity() noexcept override { return &activity_; }

  std::size_t collect_idle() override {
    return static_cast<std::size_t>(to_u64(store_.query({}, sql_.collect_idle, {}).at(0).at(0)));
  }

 private:
  // One attempt: on the holder's connection when this client holds the key for the owner (a
  // re-entry), on the connection the server granted a waiter, or on a pooled one, which keeps
  // the lock when it takes the key.
  backend::AcquireResult attempt(const backend::AcquireRequest& request, std::optional<Pool::Lease>& granted) {
    const std::string lock = std::to_string(session_lock_id(settings_.table, request.key));
    const std::string ttl = ms_text(request.ttl);
    if (auto hold = find(request.key, request.owner)) {
      const std::lock_guard guard(hold->mutex);
      const backend::LeaseRef lease{request.key, request.owner, hold->token};
      const auto rows = on_hold(*hold, lease, [&](Connection& c) {
        return c.query(sql_.take, {request.key, request.owner, ttl, lock, "t", std::to_string(c.tag())});
      });
      if (rows) {
        const Row& row = rows->at(0);
        if (row[0] == "reentered") return backend::Acquired{hold->token, held_count(row)};
        if (row[0] == "acquired") {  // the key was free again, and the lock still this connection's
          hold->token = to_u64(row[2]);
          return backend::Acquired{hold->token, 1};
        }
        if (row[0] == "busy") return busy(row, request.key);  // evicted, within its lease
      }
      // Lost with its session: the key is asked for anew.
    }
    if (granted && (*granted)->broken()) granted.reset();  // its session, and the lock, ended
    for (;;) {
      std::optional<Pool::Lease> pooled;
      const bool held = granted.has_value();
      Connection* on = nullptr;
      try {
        on = held ? &**granted : &*pooled.emplace(store_.pool().take());
      } catch (const PgError& e) {
        raise(e, settings_, request.key);
      }
      // The key is ours on `on`, which keeps the lock: out of the pool with it.
      const auto pin = [&](const std::optional<std::string>& token, const std::optional<std::string>& pid) {
        auto hold = std::make_shared<Hold>(held ? std::move(*granted) : std::move(*pooled));
        granted.reset();
        hold->token = to_u64(token);
        hold->pid = pid.value_or("");
        keep(request.key, request.owner, hold);
        return backend::Acquired{hold->token, 1};
      };
      std::vector<Row> rows;
      try {
        const auto statement = [&](const std::string& sql) {
          return store_.with_connection(request.key, [&](Connection& c) {
            return c.query(sql, {request.key, request.owner, ttl, lock, held ? "t" : "f", std::to_string(c.tag())});
          }, on);
        };
        const auto fast = statement(sql_.take_fast);
        if (fast.at(0)[0]) return pin(fast[0][0], fast[0][1]);
        rows = statement(sql_.take);
      } catch (...) {
        // The statement may have taken the lock before it failed: the session goes, and the
        // lock with it.
        if (pooled) (*pooled)->discard();
        throw;
      }
      const Row& row = rows.at(0);
      if (row[0] == "epoch") {
        store_.query({}, sql_.epoch, {});
        continue;
      }
      if (row[0] == "acquired") return pin(row[2], row[6]);
      if (row[0] == "reentered") return backend::Acquired{to_u64(row[2]), held_count(row)};
      return busy(row, request.key);
    }
  }

  // A 'busy' row of the take function.
  static backend::Busy busy(const Row& row, std::string_view key) {
    if (!row[1]) return backend::Busy{{}, kTakeoverRecheck};
    LockInfo holder = holder_of(row, std::string(key), 1);
    // Evicted with a lock delay: its lease's end opens the key. A live holder's end comes
    // with its session, which the server tells a queued waiter at once.
    const auto retry = holder.evicted ? holder.ttl_left : kQueuedRecheck;
    return backend::Busy{{std::move(holder)}, retry};
  }

  static std::uint32_t held_count(const Row& row) { return static_cast<std::uint32_t>(to_u64(row[3])); }

  // Runs `statement` on the hold's connection. Nothing when that connection broke: its session
  // ended, and the lock with it (the hold is forgotten).
  template <class F>
  std::optional<std::vector<Row>> on_hold(Hold& hold, const backend::LeaseRef& lease, F&& statement) {
    if (!hold.connection->broken()) {
      try {
        return store_.with_connection(lease.key, statement, &*hold.connection);
      } catch (const Error&) {
        if (!hold.connection->broken()) throw;
      }
    }
    forget(lease.key, lease.owner);
    return std::nullopt;
  }

  // A statement on a hold's connection ran in another server process than the one that took
  // the lock: a pooler hands the connection's statements to whichever server session is free.
  void same_session(const Hold& hold, const std::optional<std::string>& pid) const {
    if (pid && *pid == hold.pid) return;
    throw ConfigurationError("postgres:// mode=session needs each connection to stay one server session, but the "
                             "statements of one connection ran in server processes " + hold.pid + " and " +
                                 pid.value_or("?") + " of " + settings_.connect.redacted_url +
                                 ": a pooler in transaction or statement mode (PgBouncer pool_mode=transaction) is in "
                                 "between. Connect to PostgreSQL directly, or through pool_mode=session, or use "
                                 "mode=lease",
                             kName);
  }

  using HoldId = std::pair<std::string, std::string>;  // key, owner
  std::shared_ptr<Hold> find(std::string_view key, std::string_view owner,
                             std::optional<std::uint64_t> token = std::nullopt) {
    const std::lock_guard lock(holds_mutex_);
    const auto it = holds_.find(HoldId(key, owner));
    if (it == holds_.end() || (token && it->second->token != *token)) return nullptr;
    return it->second;
  }
  void keep(std::string_view key, std::string_view owner, std::shared_ptr<Hold> hold) {
    const std::lock_guard lock(holds_mutex_);
    holds_[HoldId(key, owner)] = std::move(hold);
  }
  void forget(std::string_view key, std::string_view owner) {
    const std::lock_guard lock(holds_mutex_);
    holds_.erase(HoldId(key, owner));
  }

  Store store_;
  const Settings& settings_ = store_.settings();
  const SessionSql sql_{settings_.table};
  ActivityTable activity_{store_};
  std::mutex holds_mutex_;
  std::map<HoldId, std::shared_ptr<Hold>> holds_;
};

}  // namespace

std::shared_ptr<backend::Backend> make_session_backend(Settings settings) {
  return std::make_shared<SessionBackend>(std::move(settings));
}

}  // namespace dlock::backends::postgres
