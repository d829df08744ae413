// postgres:// lease mode: a row per key in a lock table, each step one statement judged by the
// server's clock; shared holds in a table beside it, through PL/pgSQL functions; waiters sleep
// on the key's channel (listen_bell.hpp). README.md says why.

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
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

constexpr const char* kSharedOwner = " shared";  // the key's row while held shared (no owner has a space first)

// A waiting writer renews its claim at least this often (backend.hpp: at most half of it).
constexpr auto kClaimRenewal = backend::kWriterClaim / 2;

class LeaseBackend final : public backend::Backend {
 public:
  explicit LeaseBackend(Settings settings) : store_(std::move(settings)) {}

  std::string_view name() const noexcept override { return kName; }

  backend::Capabilities capabilities() const noexcept override {
    backend::Capabilities c;
    c.spans_processes = true;
    c.holds_outlive_the_client = true;
    c.records_acquisition_time = true;
    c.shared_holders = true;
    return c;
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override { return acquire_on(request, nullptr); }

  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override {
    auto bell = std::make_unique<ListenBell>(store_.pool(), settings_, request.key);
    ListenBell* line = bell.get();  // owned by the waiter, as this attempt function is
    const auto attempt = [this, line](const backend::AcquireRequest& r) {
      Connection* on = nullptr;
      try {
        on = line->connection();
      } catch (const PgError& e) {
        raise(e, settings_, r.key);
      }
      auto result = acquire_on(r, on);
      // A waiter not yet next in line is woken by the slot's grant, not by looking again: its
      // attempts would only barge in ahead of the line (and renew the writer's claim, which
      // the one next in line renews). It looks again when the holders' leases would end.
      if (auto* busy = std::get_if<backend::Busy>(&result); busy && !busy->holders.empty() && !line->next_in_line()) {
        busy->retry_within = std::min_element(busy->holders.begin(), busy->holders.end(), [](const auto& a, const auto& b) {
                               return a.ttl_left < b.ttl_left;
                             })->ttl_left;
      }
      return result;
    };
    return std::make_unique<BellWaiter>(attempt, request, std::move(bell));
  }

  // One attempt, on `on` (a waiter's connection) or a pooled connection.
  backend::AcquireResult acquire_on(const backend::AcquireRequest& request, Connection* on) {
    if (request.mode == LockMode::shared) return acquire_shared(request, on);
    const std::string ttl = ms_text(request.ttl);
    if (request.waiting) {
      const auto rows = query(request.key, sql_.acquire_waiting, {request.key, request.owner, ttl}, on);
      const Row& row = rows.at(0);
      if (row[0] == "t") return backend::Acquired{to_u64(row[2]), static_cast<std::uint32_t>(to_u64(row[3]))};
      const std::string owner = row[1].value_or("");
      if (owner.empty() || to_ms(row[4]).count() == 0) {
        // Free, but held for the readers who waited behind its last writer.
        return backend::Busy{{}, std::clamp(to_ms(row[6]), std::chrono::milliseconds(1), kClaimRenewal)};
      }
      auto busy = owner == kSharedOwner ? holders_busy(request.key, on)
                                        : backend::Busy{{holder_of(row, std::string(request.key), 1)}, {}};
      if (!busy.holders.empty()) busy.retry_within = std::min(busy.holders.front().ttl_left, kClaimRenewal);
      return busy;
    }
    const auto rows = query(request.key, sql_.acquire, {request.key, request.owner, ttl}, on);
    if (!rows.empty()) {
      return backend::Acquired{to_u64(rows[0][0]), static_cast<std::uint32_t>(to_u64(rows[0][1]))};
    }
    return holders_busy(request.key, on);
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    const std::string token = std::to_string(lease.token);
    const auto renew_shared = [&] {
      return query(lease.key, sql_.shared_renew, {lease.key, lease.owner, token, ms_text(ttl)}).at(0)[0] == "t";
    };
    if (is_shared(lease)) return renew_shared();
    // A shared hold another client took (an explicit owner shared across clients) is not known
    // here: tried second.
    return !query(lease.key, sql_.renew, {lease.key, lease.owner, token, ms_text(ttl)}).empty() || renew_shared();
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    const std::string token = std::to_string(lease.token);
    const std::string channel = key_channel(settings_.table, lease.key);
    const auto release_shared = [&]() -> std::optional<std::uint32_t> {
      const auto rows = query(lease.key, sql_.shared_free, {lease.key, lease.owner, token, channel});
      const auto& left = rows.at(0)[0];
      if (!left || *left == "0") forget_shared(lease);
      if (!left) return std::nullopt;
      return static_cast<std::uint32_t>(to_u64(left));
    };
    if (is_shared(lease)) return release_shared();
    const auto rows = query(lease.key, sql_.release, {lease.key, lease.owner, token, channel});
    if (!rows.empty()) return static_cast<std::uint32_t>(to_u64(rows[0][0]));
    if (!query(lease.key, sql_.release_stale, {lease.key, lease.owner, token, channel}).empty()) return std::nullopt;
    return release_shared();
  }

  std::vector<LockInfo> inspect(std::string_view key) override { return inspect_on(key, nullptr); }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    if (limit == 0) return {};
    return list_page(query({}, sql_.list, {prefix, after, list_most(limit)}), limit);
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    const std::optional<std::string> token_text = token ? std::optional(std::to_string(*token)) : std::nullopt;
    const Param token_param = token_text ? Param(*token_text) : std::nullopt;
    const std::string immediate = eviction == Eviction::immediate ? "t" : "f";
    std::vector<LockInfo> evicted;
    for (const auto& row : query(key, sql_.evict, {key, token_param, immediate, key_channel(settings_.table, key)})) {
      evicted.push_back(holder_of(row, std::string(key), 0, true));
    }
    return evicted;
  }

  void ping() override { store_.query({}, "SELECT 1", {}); }

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
  std::vector<Row> query(std::string_view key, const std::string& sql, std::initializer_list<Param> params,
                         Connection* on = nullptr) {
    return store_.query(key, sql, params, on);
  }

  std::vector<LockInfo> inspect_on(std::string_view key, Connection* on) {
    std::vector<LockInfo> holders;
    for (const auto& row : query(key, sql_.inspect, {key}, on)) holders.push_back(holder_of(row, std::string(key), 1, true));
    return holders;
  }

  backend::AcquireResult acquire_shared(const backend::AcquireRequest& request, Connection* on) {
    const auto rows = query(request.key, sql_.shared_take,
                            {request.key, request.owner, ms_text(request.ttl), std::to_string(request.permits),
                             request.waiting ? "t" : "f", std::to_string(request.waited_behind)},
                            on);
    const Row& first = rows.at(0);
    if (first[0] == "acquired") {
      if (first[6] == "t") remember_shared({request.key, request.owner, to_u64(first[2])});
      return backend::Acquired{to_u64(first[2]), static_cast<std::uint32_t>(to_u64(first[3]))};
    }
    if (first[0] == "permits") {
      throw backend::permits_disagree(request.key, static_cast<std::uint32_t>(to_u64(first[3])), request.permits);
    }
    backend::Busy busy{{}, std::chrono::milliseconds::max()};
    for (const auto& row : rows) {
      busy.retry_within = std::min(busy.retry_within, to_ms(row[7]));
      if (row[1]) busy.holders.push_back(holder_of(row, std::string(request.key), 1, true));
    }
    return busy;
  }

  // The key's live holders, as a Busy answer.
  backend::Busy holders_busy(std::string_view key, Connection* on) {
    auto holders = inspect_on(key, on);
    // Freed between the two statements (or held for waiting readers): attempt again soon.
    const auto left = holders.empty() ? std::chrono::milliseconds(1) : holders.front().ttl_left;
    return backend::Busy{std::move(holders), left};
  }

  // The shared holds this client took: their release and renewal go straight to the functions.
  using LeaseId = std::tuple<std::string, std::string, std::uint64_t>;
  void remember_shared(const backend::LeaseRef& lease) {
    const std::lock_guard lock(shared_mutex_);
    shared_.emplace(std::string(lease.key), std::string(lease.owner), lease.token);
  }
  void forget_shared(const backend::LeaseRef& lease) {
    const std::lock_guard lock(shared_mutex_);
    shared_.erase(LeaseId(lease.key, lease.owner, lease.token));
  }
  bool is_shared(const backend::LeaseRef& lease) {
    const std::lock_guard lock(shared_mutex_);
    return shared_.contains(LeaseId(lease.key, lease.owner, lease.token));
  }

  Store store_;
  const Settings& settings_ = store_.settings();
  const LeaseSql sql_{settings_.table};
  ActivityTable activity_{store_};
  std::mutex shared_mutex_;
  std::set<LeaseId> shared_;
};

}  // namespace

std::shared_ptr<backend::Backend> make_lease_backend(Settings settings) {
  return std::make_shared<LeaseBackend>(std::move(settings));
}

}  // namespace dlock::backends::postgres
