// postgres:// session mode: the lock is a session advisory lock of a connection the holder keeps
// for it, so it ends with that connection: a crashed holder frees the key at once, and a
// holder whose connection ended learns of it at its next renewal. Owner, holds and token live in
// unlogged tables beside it (session_sql.hpp): nothing durable is written per acquisition.
// Waiters wait for the lock itself, queued by the server (session_waiter.hpp). README.md says
// what this costs and where it cannot work (a pooler in transaction mode).

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "backends/postgres/activity.hpp"
#include "backends/postgres/common.hpp"
#include "backends/postgres/listen_bell.hpp"
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
  LockMode mode = LockMode::exclusive;
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
    c.shared_holders = true;
    return c;
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override {
    std::optional<Pool::Lease> none;
    return attempt(request, none);
  }

  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override {
    return std::make_unique<SessionWaiter>(
        store_.pool(), settings_,
        [this](const backend::AcquireRequest& r, std::optional<Pool::Lease>& granted) { return attempt(r, granted); },
        request, session_lock_id(settings_.table, request.key));
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    const std::string token = std::to_string(lease.token);
    if (auto hold = find(lease.key, lease.owner, lease.token)) {
      const std::lock_guard lock(hold->mutex);
      const auto& sql = hold->mode == LockMode::shared ? sql_.shared_renew : sql_.renew;
      const auto rows = on_hold(*hold, lease, [&](Connection& c) {
        return c.query(sql, {lease.key, lease.owner, token, ms_text(ttl), std::to_string(c.tag())});
      });
      if (!rows || rows->empty()) return false;
      same_session(*hold, rows->at(0)[1]);
      return true;
    }
    // The owner's hold taken by another client (an owner shared across clients), of either mode.
    for (const auto* sql : {&sql_.renew, &sql_.shared_renew}) {
      if (!store_.query(lease.key, *sql, {lease.key, lease.owner, token, ms_text(ttl), "0"}).empty()) return true;
    }
    return false;
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    const std::string token = std::to_string(lease.token);
    // The key's channel, which only a shared release notifies: not worked out for the common one.
    const auto channel = [&] { return key_channel(settings_.table, lease.key); };
    auto hold = find(lease.key, lease.owner, lease.token);
    std::vector<Row> rows;
    if (hold) {
      const std::lock_guard lock(hold->mutex);
      const bool shared = hold->mode == LockMode::shared;
      if (!shared) {
        auto freed = on_hold(*hold, lease, [&](Connection& c) {
          return c.query(sql_.free_fast, {lease.key, lease.owner, token, std::to_string(c.tag())});
        });
        if (!freed) return std::nullopt;  // the session ended, and the lock with it
        if (!freed->empty()) {
          same_session(*hold, freed->at(0)[1]);
          forget(lease.key, lease.owner);  // the connection goes back to the pool
          return 0u;
        }
      }
      auto answer = on_hold(*hold, lease, [&](Connection& c) {
        const std::string tag = std::to_string(c.tag());
        return shared ? c.query(sql_.shared_free, {lease.key, lease.owner, token, tag, channel()})
                      : c.query(sql_.free, {lease.key, lease.owner, token, tag});
      });
      if (!answer) return std::nullopt;  // the session ended, and the lock with it
      rows = std::move(*answer);
      if (rows.at(0)[0]) same_session(*hold, rows.at(0)[2]);
    } else {
      // The owner's hold taken by another client (an owner shared across clients), of either mode.
      rows = store_.query(lease.key, sql_.free, {lease.key, lease.owner, token, "0"});
      if (!rows.at(0)[0]) rows = store_.query(lease.key, sql_.shared_free, {lease.key, lease.owner, token, "0", channel()});
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
    for (const auto& row : store_.query(key, sql_.inspect, {key})) holders.push_back(holder_of(row, std::string(key), 0, true));
    return holders;
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    if (limit == 0) return {};
    return list_page(store_.query({}, sql_.list, {prefix, after, list_most(limit)}), limit);
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    const std::optional<std::string> token_text = token ? std::optional(std::to_string(*token)) : std::nullopt;
    const Param token_param = token_text ? Param(*token_text) : std::nullopt;
    std::vector<LockInfo> evicted;
    const std::string channel = key_channel(settings_.table, key);
    for (const auto& row :
         store_.query(key, sql_.evict, {key, token_param, eviction == Eviction::immediate ? "t" : "f", channel})) {
      evicted.push_back(holder_of(row, std::string(key), 0, true));
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
    // A hold of the other mode re-enters from a pooled connection, which finds it by its lock:
    // its connection's lock is of that mode.
    if (auto hold = find(request.key, request.owner); hold && hold->mode == request.mode) {
      const std::lock_guard guard(hold->mutex);
      const backend::LeaseRef lease{request.key, request.owner, hold->token};
      const auto rows = on_hold(*hold, lease, [&](Connection& c) { return take(c, request, lock, true); });
      if (rows) {
        const Row& row = rows->at(0);
        if (row[0] == "reentered") return backend::Acquired{hold->token, held_count(row)};
        if (row[0] == "acquired") {  // the key was free again, and the lock still this connection's
          hold->token = to_u64(row[2]);
          return backend::Acquired{hold->token, 1};
        }
        if (row[0] == "busy") return busy(*rows, request.key);  // evicted, within its lease
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
        hold->mode = request.mode;
        keep(request.key, request.owner, hold);
        return backend::Acquired{hold->token, 1};
      };
      std::vector<Row> rows;
      bool fast = false;  // taken by take_fast: its row is the token and the server process
      try {
        rows = store_.with_connection(request.key, [&](Connection& c) -> std::vector<Row> {
          if (request.mode == LockMode::exclusive) {
            auto taken = c.query(sql_.take_fast, {request.key, request.owner, ms_text(request.ttl), lock,
                                                  held ? "t" : "f", std::to_string(c.tag())});
            if ((fast = taken.at(0)[0].has_value())) return taken;
          }
          return take(c, request, lock, held);
        }, on);
      } catch (...) {
        // The statement may have taken the lock before it failed: the session goes, and the
        // lock with it.
        if (pooled) (*pooled)->discard();
        throw;
      }
      const Row& row = rows.at(0);
      if (fast) return pin(row[0], row[1]);
      if (row[0] == "epoch") {
        store_.query({}, sql_.epoch, {});
        continue;
      }
      if (row[0] == "acquired") return pin(row[2], row[7]);
      if (row[0] == "reentered") return backend::Acquired{to_u64(row[2]), held_count(row)};
      if (row[0] == "permits") {
        throw backend::permits_disagree(request.key, held_count(row), request.permits);
      }
      return busy(rows, request.key);
    }
  }

  // The take function of the request's mode, on `c`, which has the key's lock if `held`.
  std::vector<Row> take(Connection& c, const backend::AcquireRequest& request, const std::string& lock, bool held) {
    const std::string ttl = ms_text(request.ttl), tag = std::to_string(c.tag());
    const char* held_text = held ? "t" : "f";
    const char* waiting = request.waiting ? "t" : "f";
    if (request.mode == LockMode::exclusive) {
      return c.query(sql_.take, {request.key, request.owner, ttl, lock, held_text, tag, waiting});
    }
    return c.query(sql_.shared_take, {request.key, request.owner, ttl, lock, held_text, tag, waiting,
                                      std::to_string(request.permits), std::to_string(request.waited_behind)});
  }

  // The 'busy' rows of a take function: every live holder, or one row without a holder to name.
  static backend::Busy busy(const std::vector<Row>& rows, std::string_view key) {
    if (!rows.at(0)[1]) return backend::Busy{{}, kTakeoverRecheck};
    backend::Busy busy{{}, kQueuedRecheck};
    for (const Row& row : rows) {
      LockInfo holder = holder_of(row, std::string(key), 1, true);
      // Evicted with a lock delay: its lease's end opens the key. A live holder's end comes
      // with its session, which the server tells a queued waiter at once.
      if (holder.evicted) busy.retry_within = std::min(busy.retry_within, holder.ttl_left);
      busy.holders.push_back(std::move(holder));
    }
    return busy;
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
