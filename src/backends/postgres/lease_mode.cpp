// postgres:// lease mode: a row per key in a lock table, each step one statement judged by the
// server's clock; waiters sleep on the key's channel (listen_bell.hpp). README.md says why.

#include <memory>
#include <utility>

#include "backends/bell_waiter.hpp"
#include "backends/postgres/activity.hpp"
#include "backends/postgres/common.hpp"
#include "backends/postgres/lease_sql.hpp"
#include "backends/postgres/listen_bell.hpp"
#include "backends/postgres/store.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::postgres {
namespace {

// A holder as inspect, list and force-release read it: owner, token, holds, ttl left, time held
// from column `first` on.
LockInfo holder(const Row& row, std::string key, std::size_t first) {
  LockInfo info;
  info.key = std::move(key);
  info.owner = row[first].value_or("");
  info.token = to_u64(row[first + 1]);
  info.hold_count = static_cast<std::uint32_t>(to_u64(row[first + 2]));
  info.ttl_left = to_ms(row[first + 3]);
  info.held_for = to_ms(row[first + 4]);
  info.evicted = info.hold_count == 0;
  return info;
}

std::string ms_text(std::chrono::milliseconds ms) { return std::to_string(ms.count()); }

class LeaseBackend final : public backend::Backend {
 public:
  explicit LeaseBackend(Settings settings) : store_(std::move(settings)) {}

  std::string_view name() const noexcept override { return kName; }

  backend::Capabilities capabilities() const noexcept override {
    backend::Capabilities c;
    c.spans_processes = true;
    c.holds_outlive_the_client = true;
    c.records_acquisition_time = true;
    return c;
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override {
    if (request.mode != LockMode::exclusive) {
      throw InvalidArgument("postgres:// has no shared holds yet (read-write locks, semaphores)", std::string(request.key));
    }
    const std::string ttl = ms_text(request.ttl);
    if (request.waiting) {
      const auto rows = query(request.key, sql_.acquire_waiting, {request.key, request.owner, ttl});
      const Row& row = rows.at(0);
      if (row[0] == "t") return backend::Acquired{to_u64(row[2]), static_cast<std::uint32_t>(to_u64(row[3]))};
      LockInfo info = holder(row, std::string(request.key), 1);
      const auto left = info.ttl_left;
      return backend::Busy{{std::move(info)}, left};
    }
    const auto rows = query(request.key, sql_.acquire, {request.key, request.owner, ttl});
    if (!rows.empty()) {
      return backend::Acquired{to_u64(rows[0][0]), static_cast<std::uint32_t>(to_u64(rows[0][1]))};
    }
    auto holders = inspect(request.key);
    // Freed between the two statements: attempt again at once.
    const auto left = holders.empty() ? std::chrono::milliseconds(0) : holders.front().ttl_left;
    return backend::Busy{std::move(holders), left};
  }

  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override {
    return std::make_unique<BellWaiter>(*this, request, std::make_unique<ListenBell>(store_.bells(), settings_, request.key));
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    return !query(lease.key, sql_.renew, {lease.key, lease.owner, std::to_string(lease.token), ms_text(ttl)}).empty();
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    const std::string token = std::to_string(lease.token);
    const std::string channel = key_channel(settings_.table, lease.key);
    const auto rows = query(lease.key, sql_.release, {lease.key, lease.owner, token, channel});
    if (!rows.empty()) return static_cast<std::uint32_t>(to_u64(rows[0][0]));
    query(lease.key, sql_.release_stale, {lease.key, lease.owner, token, channel});
    return std::nullopt;
  }

  std::vector<LockInfo> inspect(std::string_view key) override {
    std::vector<LockInfo> holders;
    for (const auto& row : query(key, sql_.inspect, {key})) holders.push_back(holder(row, std::string(key), 0));
    return holders;
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    if (limit == 0) return {};
    // One row more than asked tells whether another page follows.
    const std::string most = std::to_string(std::min<std::size_t>(limit, INT64_MAX - 1) + 1);
    ListPage page;
    for (const auto& row : query({}, sql_.list, {prefix, after, most})) {
      if (page.locks.size() == limit) {
        page.next_after = page.locks.back().key;
        break;
      }
      page.locks.push_back(holder(row, row[0].value_or(""), 1));
    }
    return page;
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    const std::optional<std::string> token_text = token ? std::optional(std::to_string(*token)) : std::nullopt;
    const Param token_param = token_text ? Param(*token_text) : std::nullopt;
    std::vector<LockInfo> evicted;
    const auto rows =
        eviction == Eviction::immediate
            ? query(key, sql_.force_immediate, {key, token_param, key_channel(settings_.table, key)})
            : query(key, sql_.force_delayed, {key, token_param});
    for (const auto& row : rows) evicted.push_back(holder(row, std::string(key), 0));
    return evicted;
  }

  void ping() override {
    store_.query({}, "SELECT 1", {});
  }

  backend::ActivityLedger* activity() noexcept override { return &activity_; }

  std::size_t collect_idle() override {
    return store_.with_connection({}, [this](Connection& c) -> std::size_t {
      c.run(sql_.collect_begin);
      try {
        const auto rows = c.query(sql_.collect_idle, {});
        c.run("COMMIT");
        return static_cast<std::size_t>(to_u64(rows.at(0).at(0)));
      } catch (const PgError&) {
        if (!c.broken()) c.run("ROLLBACK");
        throw;
      }
    });
  }

 private:
  std::vector<Row> query(std::string_view key, const std::string& sql, std::initializer_list<Param> params) {
    return store_.query(key, sql, params);
  }

  Store store_;
  const Settings& settings_ = store_.settings();
  const LeaseSql sql_{settings_.table};
  ActivityTable activity_{store_};
};

}  // namespace

std::shared_ptr<backend::Backend> make_lease_backend(Settings settings) {
  return std::make_shared<LeaseBackend>(std::move(settings));
}

}  // namespace dlock::backends::postgres
