#include "backends/sqlite/sqlite_backend.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "backends/sqlite/connection.hpp"
#include "backends/sqlite/errors.hpp"
#include "backends/sqlite/host.hpp"
#include "backends/sqlite/lock_sets.hpp"
#include "backends/sqlite/rows.hpp"
#include "backends/sqlite/schema.hpp"
#include "backends/sqlite/shared_holds.hpp"
#include "backends/sqlite/statements.hpp"
#include "backends/sqlite/wake_board.hpp"
#include "core/log.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends {
namespace {

using sqlite::boot_time_us;
using sqlite::Connection;
using sqlite::create_parent_directories;
using sqlite::kName;
using sqlite::path_error;
using sqlite::Query;
using sqlite::row_info;
using sqlite::ttl_us;
using namespace sqlite::statements;

constexpr std::chrono::milliseconds kDefaultBusyTimeout{10'000};
constexpr std::chrono::milliseconds kMaxBusyTimeout{24 * 3'600'000};
class SqliteBackend final : public backend::Backend, public backend::ActivityLedger {
 public:
  SqliteBackend(const std::string& path, int busy_ms) : busy_ms_(busy_ms) {
    std::error_code ec;
    const auto absolute = std::filesystem::absolute(path, ec).lexically_normal();
    if (ec) path_error("cannot resolve", path, ec.value());
    create_parent_directories(absolute);
    // SQLite reports a file it may not create as "unable to open" with a misleading errno.
    if (::access(absolute.c_str(), F_OK) != 0 &&
        ::faccessat(AT_FDCWD, absolute.parent_path().c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
      path_error("cannot create", absolute.string(), errno);
    }
    auto first = std::make_unique<Connection>(absolute.string(), busy_ms_, kSql);
    // Every connection and the wake board must name the same file as every other process,
    // whatever this process's working directory later is or the symlinks it went through.
    if (char* resolved = ::realpath(absolute.c_str(), nullptr)) {
      path_ = resolved;
      std::free(resolved);
    } else {
      path_error("cannot resolve", absolute.string(), errno);
    }
    sqlite::set_up_schema(*first);
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) path_error("cannot inspect", path_, errno);
    board_ = sqlite::WakeBoard::open(path_ + "-wake", st.st_mode & 0777);
    idle_.push_back(std::move(first));
  }

  // The watcher reads through the pool: it stops first.
  ~SqliteBackend() override { watch_.reset(); }
  SqliteBackend(const SqliteBackend&) = delete;
  SqliteBackend& operator=(const SqliteBackend&) = delete;

  std::string_view name() const noexcept override { return kName; }
  backend::Capabilities capabilities() const noexcept override {
    return {.spans_processes = true,
            .holds_outlive_the_client = true,
            .records_acquisition_time = true,
            .shared_holders = true,
            .notifies_evictions = true};
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override {
    Borrowed connection(*this);
    if (request.mode == LockMode::shared) {
      ensure_table(*connection, shared_tables_ready_, kSharedSchema);
      return sqlite::acquire_shared(*connection, request, ttl_us(request.ttl));
    }
    auto result = acquire_exclusive(*connection, request);
    auto* busy = std::get_if<backend::Busy>(&result);
    if (!busy) return result;
    name_shared_holders(*connection, request.key, *busy);
    if (request.waiting) {
      ensure_table(*connection, shared_tables_ready_, kSharedSchema);
      sqlite::place_writer_claim(*connection, request.key);
      busy->retry_within = std::min(busy->retry_within, std::chrono::milliseconds(backend::kWriterClaim / 2));
    }
    return result;
  }

  // Exclusive sets in one statement (lock_sets.hpp). Shared requests go one by one (each is a
  // transaction of its own).
  std::optional<backend::AcquireSetResult> acquire_set(std::span<const backend::AcquireRequest> requests) override {
    const auto shared = [](const backend::AcquireRequest& r) { return r.mode == LockMode::shared; };
    if (std::any_of(requests.begin(), requests.end(), shared)) return std::nullopt;
    Borrowed connection(*this);
    auto result = sqlite::acquire_set(*connection, requests);
    if (auto* busy = result ? std::get_if<backend::SetBusy>(&*result) : nullptr) {
      name_shared_holders(*connection, requests[busy->index].key, busy->busy);
    }
    return result;
  }

  // The live holds in one statement; a lease that is not one (evicted, shared, gone) takes
  // release()'s other paths.
  std::optional<std::vector<std::optional<std::uint32_t>>> release_set(
      std::span<const backend::LeaseRef> leases) override {
    auto left = [&] {
      Borrowed connection(*this);
      return sqlite::release_set(*connection, leases);
    }();
    for (std::size_t i = 0; i < leases.size(); ++i) {
      if (!left[i]) {
        left[i] = release(leases[i]);
      } else if (*left[i] == 0) {
        board_->ring(leases[i].key);  // committed: the key is free
      }
    }
    return left;
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    Borrowed connection(*this);
    {
      LeaseQuery query(*connection, kRenew, lease);
      query.bind(4, ttl_us(ttl));
      if (query.one_row([] {})) return true;
    }
    ensure_table(*connection, shared_tables_ready_, kSharedSchema);
    return sqlite::renew_shared(*connection, lease, ttl_us(ttl));
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    std::optional<std::uint32_t> left;
    bool ended = false;
    {
      Borrowed connection(*this);
      {
        LeaseQuery query(*connection, kRelease, lease);
        query.one_row([&] { left = static_cast<std::uint32_t>(query.int64(0)); });
      }
      // No longer ours, or a shared hold (rare): if it was evicted with a lock delay, this
      // release ends its hold.
      if (left) {
        ended = *left == 0;
      } else if (LeaseQuery(*connection, kReleaseEvicted, lease).one_row([] {})) {
        ended = true;
      } else {
        ensure_table(*connection, shared_tables_ready_, kSharedSchema);
        if (const auto shared = sqlite::release_shared(*connection, lease)) {
          left = *shared;
          ended = !left || *left == 0;
        }
      }
    }
    if (ended) board_->ring(lease.key);  // committed: a hold ended
    return left;
  }

  std::vector<LockInfo> inspect(std::string_view key) override {
    Borrowed connection(*this);
    Query query(*connection, kInspect, key);
    query.bind(1, key);
    std::vector<LockInfo> holders;
    query.one_row([&] { holders.push_back(row_info(query, std::string(key), 0)); });
    if (!holders.empty() && holders.front().owner == kSharedOwner) {
      ensure_table(*connection, shared_tables_ready_, kSharedSchema);
      return sqlite::shared_holders(*connection, key);
    }
    return holders;
  }

 private:
  // A Busy whose holder is the marker of shared holds names the shared holders instead.
  void name_shared_holders(Connection& connection, std::string_view key, backend::Busy& busy) {
    if (busy.holders.empty() || busy.holders.front().owner != kSharedOwner) return;
    ensure_table(connection, shared_tables_ready_, kSharedSchema);
    busy.holders = sqlite::shared_holders(connection, key);
    for (const auto& holder : busy.holders) busy.retry_within = std::min(busy.retry_within, holder.ttl_left);
  }

  backend::AcquireResult acquire_exclusive(Connection& connection, const backend::AcquireRequest& request) {
    Query query(connection, kAcquire, request.key);
    query.bind(1, request.key).bind(2, request.owner).bind(3, ttl_us(request.ttl));
    backend::AcquireResult result;
    const bool found = query.one_row([&] {
      if (auto refused = sqlite::refusal(query, request.key, request.owner, 0)) {
        result = std::move(*refused);
      } else {
        result =
            backend::Acquired{static_cast<std::uint64_t>(query.int64(1)), static_cast<std::uint32_t>(query.int64(2))};
      }
    });
    if (!found) throw BackendError("acquire returned no row from " + path_, kName, std::string(request.key));
    return result;
  }

 public:
  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    if (limit == 0) return {};
    // Keys compare bytewise (BINARY collation, like std::string_view), so the keys that start
    // with `prefix` are exactly [prefix, prefix_end) and the primary key serves the range.
    std::string prefix_end(prefix);
    while (!prefix_end.empty() && static_cast<unsigned char>(prefix_end.back()) == 0xff) prefix_end.pop_back();
    if (!prefix_end.empty()) prefix_end.back() = static_cast<char>(static_cast<unsigned char>(prefix_end.back()) + 1);
    Borrowed connection(*this);
    Query query(*connection, kList);
    query.bind(1, std::max(prefix, after)).bind(2, after);
    if (prefix_end.empty()) {
      query.bind_empty_blob(3);
    } else {
      query.bind(3, prefix_end);
    }
    // One row more than asked tells whether another page follows.
    query.bind(4, static_cast<std::int64_t>(std::min<std::size_t>(limit, INT64_MAX - 1) + 1));
    ListPage page;
    bool any_shared = false;
    for (std::size_t keys = 0; query.step(); ++keys) {
      if (keys == limit) {
        page.next_after = page.locks.back().key;
        break;
      }
      page.locks.push_back(row_info(query, query.text(0), 1));
      any_shared = any_shared || page.locks.back().owner == kSharedOwner;
    }
    if (!any_shared) return page;
    // Keys held shared: their holders in place of the marker row.
    ensure_table(*connection, shared_tables_ready_, kSharedSchema);
    std::vector<LockInfo> locks;
    for (auto& lock : page.locks) {
      if (lock.owner != kSharedOwner) {
        locks.push_back(std::move(lock));
        continue;
      }
      for (auto& holder : sqlite::shared_holders(*connection, lock.key)) locks.push_back(std::move(holder));
    }
    page.locks = std::move(locks);
    return page;
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    std::vector<LockInfo> released;
    {
      Borrowed connection(*this);
      ensure_table(*connection, evictions_table_ready_, kEvictionsSchema);
      ensure_table(*connection, shared_tables_ready_, kSharedSchema);
      connection->exec("BEGIN IMMEDIATE");
      bool shared = false;
      {
        Query query(*connection, kInspect, key);
        query.bind(1, key);
        query.one_row([&] { shared = query.text(0) == kSharedOwner; });
      }
      if (shared) {
        released = sqlite::force_release_shared(*connection, key, eviction, token);
      } else {
        // The holder as it was (an already evicted one counts as held); immediate deletes it.
        Query query(*connection, eviction == Eviction::immediate ? kForceRelease : kInspect, key);
        query.bind(1, key);
        if (token) query.bind(2, static_cast<std::int64_t>(*token));
        query.one_row([&] { released.push_back(row_info(query, std::string(key), 0)); });
      }
      if (!released.empty()) {
        if (eviction == Eviction::delayed && !shared) Query(*connection, kEvict, key).bind(1, key).run();
        Query(*connection, kRecordEviction, key).bind(1, key).run();
      }
      connection->exec("COMMIT");
    }
    if (released.empty()) return released;
    if (eviction == Eviction::immediate) board_->ring(key);  // committed: the key is free
    board_->announce_eviction();
    return released;
  }

  bool watch(std::shared_ptr<backend::Events> events) override {
    // Evictions from now on: none before can concern a lease of this client's.
    const std::int64_t since = boot_time_us();
    try {
      watch_ = std::make_unique<sqlite::EvictionWatch>(
          board_, [this, since](std::int64_t after) { return evictions_after(after, since); },
          [events = std::move(events)](std::string_view key) { events->evicted(key); });
    } catch (const std::system_error& e) {
      core::log(LogLevel::warning, std::string("sqlite:// cannot watch for force-releases (") + e.what() +
                                       "); evicted holders learn at their next renewal");
      return false;
    }
    return true;
  }

  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override {
    return std::make_unique<BellWaiter>(*this, request, board_->bell(request.key));
  }

  void ping() override {
    Borrowed connection(*this);
    Query query(*connection, kPing);
    query.one_row([] {});
  }

  std::size_t collect_idle() override {
    Borrowed connection(*this);
    Query query(*connection, kCollectIdle);
    query.run();
    const auto removed = static_cast<std::size_t>(sqlite3_changes64(connection->db()));
    ensure_table(*connection, shared_tables_ready_, kSharedSchema);
    sqlite::collect_idle_shared(*connection);
    return removed;
  }

  backend::ActivityLedger* activity() noexcept override { return this; }
  void add(const Activity& delta) override {
    Borrowed connection(*this);
    ensure_table(*connection, activity_table_ready_, kActivitySchema);
    Query query(*connection, kAddActivity);
    int index = 1;
    for (const std::uint64_t value : {delta.acquisitions, delta.conflicts, delta.waits, delta.wait_us, delta.renewals,
                                      delta.losses}) {
      query.bind(index++, static_cast<std::int64_t>(value));
    }
    query.run();
  }

  Activity totals() override {
    Borrowed connection(*this);
    ensure_table(*connection, activity_table_ready_, kActivitySchema);
    Query query(*connection, kActivity);
    Activity totals;
    query.one_row([&] {
      const auto at = [&](int column) { return static_cast<std::uint64_t>(query.int64(column)); };
      totals = Activity{at(0), at(1), at(2), at(3), at(4), at(5)};
    });
    return totals;
  }

 private:
  // A pooled connection for one call: taken from the idle stack (or opened), then returned,
  // so the renewal thread never queues behind a user thread's statement.
  class Borrowed {
   public:
    explicit Borrowed(SqliteBackend& backend) : backend_(backend) {
      {
        std::lock_guard lock(backend_.pool_mutex_);
        if (!backend_.idle_.empty()) {
          connection_ = std::move(backend_.idle_.back());
          backend_.idle_.pop_back();
        }
      }
      if (!connection_) connection_ = std::make_unique<Connection>(backend_.path_, backend_.busy_ms_, kSql);
    }
    ~Borrowed() {
      // A connection left inside a transaction by an error is closed, which rolls it back.
      if (!sqlite3_get_autocommit(connection_->db())) return;
      std::lock_guard lock(backend_.pool_mutex_);
      backend_.idle_.push_back(std::move(connection_));
    }
    Borrowed(const Borrowed&) = delete;
    Borrowed& operator=(const Borrowed&) = delete;

    Connection& operator*() const noexcept { return *connection_; }
    Connection* operator->() const noexcept { return connection_.get(); }

   private:
    SqliteBackend& backend_;
    std::unique_ptr<Connection> connection_;
  };

  // A statement that binds a lease as ?1 key, ?2 owner, ?3 token.
  class LeaseQuery : public Query {
   public:
    LeaseQuery(Connection& connection, Sql which, const backend::LeaseRef& lease) : Query(connection, which, lease.key) {
      bind(1, lease.key).bind(2, lease.owner).bind(3, static_cast<std::int64_t>(lease.token));
    }
  };

  // Creates a table made on first use, once per backend.
  static void ensure_table(Connection& connection, std::atomic<bool>& ready, const char* schema) {
    if (ready.load()) return;
    connection.exec(schema);
    ready.store(true);
  }

  // The keys force-released after sequence number `after` and at or after `since` (µs of
  // dlock_now_us()), for EvictionWatch.
  sqlite::EvictionWatch::Evictions evictions_after(std::int64_t after, std::int64_t since) {
    Borrowed connection(*this);
    Query query(*connection, kEvictedSince);
    query.bind(1, after).bind(2, since);
    sqlite::EvictionWatch::Evictions found{{}, after};
    while (query.step()) {
      found.last = query.int64(0);
      found.keys.push_back(query.text(1));
    }
    return found;
  }

  std::string path_;
  int busy_ms_;
  std::shared_ptr<sqlite::WakeBoard> board_;
  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::atomic<bool> activity_table_ready_{false};
  std::atomic<bool> evictions_table_ready_{false};
  std::atomic<bool> shared_tables_ready_{false};
  std::unique_ptr<sqlite::EvictionWatch> watch_;
};

}  // namespace

std::shared_ptr<backend::Backend> make_sqlite_backend(const core::Url& url) {
  core::UrlOptions options(url);
  const auto busy_timeout = options.take_duration("busy_timeout").value_or(kDefaultBusyTimeout);
  options.finish();
  if (busy_timeout > kMaxBusyTimeout) {
    throw ConfigurationError("URL option busy_timeout must be at most 24h", kName);
  }
  if (!url.user.empty() || !url.password.empty() || url.port) {
    throw ConfigurationError("sqlite:// takes a file path only, as in sqlite:///var/lib/dlock/locks.db; got " +
                                 url.redacted(),
                             kName);
  }
  const std::string path = url.host + url.path;
  if (path.empty()) {
    throw ConfigurationError(
        "sqlite:// needs a database file path: sqlite:///abs/path/locks.db or sqlite://relative/locks.db", kName);
  }
  if (path.back() == '/' || path.find('\0') != std::string::npos) {
    throw ConfigurationError("sqlite:// path '" + path + "' does not name a file: use sqlite:///path/to/locks.db",
                             kName);
  }
  return std::make_shared<SqliteBackend>(path, static_cast<int>(busy_timeout.count()));
}

}  // namespace dlock::backends
