// redis://: leases in one Redis server. Every operation is one Lua script (lua/*.lua, embedded
// at build time) judged by the server's clock; the key layout is in lua/common.lua and the
// README. Waiters queue per key and block in BLPOP on a list of their own; the release hands
// the key to the first live waiter and pushes its token there, so a handoff costs the release's
// round trip plus one wake-up, and one release wakes one waiter.

#include "backends/redis/redis_backend.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <functional>
#include <thread>
#include <utility>

#include "backends/redis/connection.hpp"
#include "backends/redis/keys.hpp"
#include "backends/redis/lua_scripts.hpp"
#include "backends/redis/sets.hpp"
#include "backends/redis/subscriber.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends {
namespace redis {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const std::string kName = "redis";
enum Script : std::size_t {
  kAcquire, kAcquireSet, kRefresh, kLeave, kRenew, kRelease, kReleaseSet, kInspect, kForceRelease, kList, kCollect,
  kAddActivity
};
const std::vector<std::string_view> kSources = {
    lua::kAcquireLua, lua::kAcquireSetLua,    lua::kRefreshLua, lua::kLeaveLua,   lua::kRenewLua,
    lua::kReleaseLua, lua::kReleaseSetLua,    lua::kInspectLua, lua::kForceReleaseLua, lua::kListLua,
    lua::kCollectLua, lua::kAddActivityLua};

struct Settings {
  Endpoint endpoint;
  bool fair = false;
  std::string ns = kDefaultNamespace;
};

class WaitChannel;

class RedisBackend final : public backend::Backend, public backend::ActivityLedger {
 public:
  explicit RedisBackend(Settings settings)
      : settings_(std::move(settings)), pool_(settings_.endpoint), scripts_(kSources), waiter_prefix_(random_hex()) {
    // Connects and loads the scripts now: a wrong URL or password fails at open, not at the first lock.
    auto connection = take({});
    try {
      scripts_.load_all(*connection);
    } catch (const RedisError& e) {
      fail(e, {}, false);
    }
  }

  std::string_view name() const noexcept override { return kName; }
  backend::Capabilities capabilities() const noexcept override {
    return {.spans_processes = true,
            .holds_outlive_the_client = true,
            .records_acquisition_time = true,
            .counts_waiters = true,
            .shared_holders = true,
            .notifies_evictions = true};
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override;

  bool renew(const backend::LeaseRef& lease, milliseconds ttl) override {
    const LockKeys keys = lock_keys(lease.key);
    const std::string token = std::to_string(lease.token);
    const std::string ttl_ms = std::to_string(ttl.count());
    auto connection = take(lease.key);
    return integer(run(*connection, kRenew, {keys.lock}, {lease.owner, token, ttl_ms}, lease.key).get()) >= 1;
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    const LockKeys keys = lock_keys(lease.key);
    const std::string token = std::to_string(lease.token);
    auto connection = take(lease.key);
    return holds_left(run(*connection, kRelease, keys.all(), {lease.key, lease.owner, token}, lease.key).get());
  }

  // Every mode, fair or not, in one script (lua/acquire_set.lua).
  std::optional<backend::AcquireSetResult> acquire_set(std::span<const backend::AcquireRequest> requests) override {
    const SetCall call = SetCall::acquire(settings_.ns, store_, requests, settings_.fair, /*readers_claims=*/false);
    auto connection = take(requests.front().key);
    const Reply reply = run(*connection, kAcquireSet, call.keys(), call.args(), requests.front().key);
    return acquire_set_answer(requests, reply.get());
  }

  std::optional<std::vector<std::optional<std::uint32_t>>> release_set(
      std::span<const backend::LeaseRef> leases) override {
    const SetCall call = SetCall::release(settings_.ns, store_, leases);
    auto connection = take(leases.front().key);
    const Reply reply = run(*connection, kReleaseSet, call.keys(), call.args(), leases.front().key);
    std::vector<std::optional<std::uint32_t>> left;
    for (std::size_t i = 0; i < leases.size(); ++i) left.push_back(holds_left(reply->element[i]));
    return left;
  }

  std::vector<LockInfo> inspect(std::string_view key) override {
    const LockKeys keys = lock_keys(key);
    auto connection = take(key);
    const Reply reply = run(*connection, kInspect, {keys.lock, keys.queue}, {}, key, false);
    auto holders = holder_rows(std::string(key), reply.get(), 1);
    for (auto& holder : holders) holder.waiters = static_cast<std::uint32_t>(u64(reply->element[0]));
    return holders;
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override;

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    const LockKeys keys = lock_keys(key);
    const std::string_view delayed = eviction == Eviction::delayed ? "1" : "0";
    const std::string holder_token = token ? std::to_string(*token) : std::string();
    auto connection = take(key);
    const Reply reply =
        run(*connection, kForceRelease, keys.all(), {key, delayed, store_.evicted, holder_token}, key);
    return holder_rows(std::string(key), reply.get(), 0);
  }

  bool watch(std::shared_ptr<backend::Events> events) override {
    auto subscriber = std::make_unique<Subscriber>(settings_.endpoint, store_.evicted,
                                                   [events = std::move(events)](std::string_view key) { events->evicted(key); });
    if (!subscriber->accepted()) return false;
    subscriber_ = std::move(subscriber);
    return true;
  }

  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override;

  void ping() override {
    auto connection = take({});
    try {
      connection->command({"PING"});
    } catch (const RedisError& e) {
      fail(e, {}, false);
    }
  }

  backend::ActivityLedger* activity() noexcept override { return this; }
  void add(const Activity& delta) override {
    const std::vector<std::string> counts = activity_counts(delta);
    auto connection = take({});
    run(*connection, kAddActivity, {store_.activity}, {counts.begin(), counts.end()}, {});
  }

  Activity totals() override {
    auto connection = take({});
    std::vector<std::string_view> command{"HMGET", store_.activity};
    command.insert(command.end(), std::begin(kActivityFields), std::end(kActivityFields));
    Activity total;
    try {
      add_activity_reply(connection->command(command).get(), total);
    } catch (const RedisError& e) {
      fail(e, {}, false);
    }
    return total;
  }

  std::size_t collect_idle() override {
    std::size_t removed = 0;
    std::string from = "-";
    const std::string batch = std::to_string(kCollectBatch);
    auto connection = take({});
    for (;;) {
      const Reply reply = run(*connection, kCollect, {store_.known, store_.held}, {settings_.ns, from, batch}, {});
      removed += u64(reply->element[0]);
      if (integer(reply->element[1]) == 1) return removed;
      from = lex_bound('(', text(reply->element[2]));
    }
  }

  // For the wait channel.
  LockKeys lock_keys(std::string_view key) const { return LockKeys(settings_.ns, key, store_.held, store_.known); }
  const Settings& settings() const noexcept { return settings_; }
  std::string new_waiter_id() { return waiter_prefix_ + "." + std::to_string(++waiters_); }
  Pool& pool() noexcept { return pool_; }
  Pool::Lease take(std::string_view key) {
    try {
      return pool_.take();
    } catch (const RedisError& e) {
      fail(e, key, false);
    }
  }
  Reply run(Connection& connection, Script script, const std::vector<std::string_view>& keys,
            const std::vector<std::string_view>& args, std::string_view key, bool writes = true) {
    try {
      return scripts_.run(connection, script, keys, args);
    } catch (const RedisError& e) {
      fail(e, key, writes);
    }
  }
  [[noreturn]] void fail(const RedisError& e, std::string_view key, bool writes) {
    raise(e, settings_.endpoint, kName, key, writes);
  }
  // ARGV of the acquire script.
  AcquireArgs acquire_args(const backend::AcquireRequest& request, std::string_view waiter) const {
    return AcquireArgs(request, settings_.fair, waiter, alive_ms_, /*readers_claims=*/false);
  }
  const std::string& alive_ms() const noexcept { return alive_ms_; }
  const std::string& claim_ms() const noexcept { return claim_ms_; }

 private:
  Settings settings_;
  Pool pool_;
  Scripts scripts_;
  const StoreKeys store_{settings_.ns};
  const std::string alive_ms_ = std::to_string(kAlive.count());
  const std::string claim_ms_ = std::to_string(backend::kWriterClaim.count());
  const std::string waiter_prefix_;
  std::atomic<std::uint64_t> waiters_{0};
  std::unique_ptr<Subscriber> subscriber_;  // force-release notices, once watched
};

// A waiting call's place in the key's queue, on a connection of its own. Its first attempt is
// a plain one; the later ones add it to the queue or refresh its entry, and between them it
// blocks in BLPOP on its box, where a release hands it the key.
class WaitChannel final : public backend::Waiter {
 public:
  WaitChannel(RedisBackend& backend, const backend::AcquireRequest& request)
      : backend_(backend), keys_(backend.lock_keys(request.key)), key_(request.key), id_(backend.new_waiter_id()),
        box_(keys_.box(id_)), owner_(request.owner), ttl_ms_(std::to_string(request.ttl.count())),
        request_{key_, owner_, request.ttl, request.mode, request.permits, /*waiting=*/true},
        shared_(request.mode == LockMode::shared ? "1" : "0"), permits_(std::to_string(request.permits)) {
    keys_.key = key_;
  }
  ~WaitChannel() override { leave(); }
  WaitChannel(const WaitChannel&) = delete;
  WaitChannel& operator=(const WaitChannel&) = delete;

  backend::AcquireResult attempt() override;
  void wait_until(Clock::time_point deadline) override { (void)wait(deadline); }

 private:
  Connection& connection() {
    if (!connection_ || (*connection_)->broken()) {
      connection_.reset();
      connection_.emplace(backend_.take(key_));
    }
    return **connection_;
  }
  std::vector<std::string_view> script_keys() const {
    auto keys = keys_.all();
    keys.push_back(box_);
    return keys;
  }
  // The key was handed to this waiter at the server's `handoff_us`: its lease runs from then,
  // placed on this host's clock after the last look that found the waiter still queued.
  Clock::time_point handed_at(std::int64_t handoff_us) const {
    const auto since = std::chrono::microseconds(std::max<std::int64_t>(handoff_us - seen_server_us_, 0));
    return std::min(seen_sent_ + since, Clock::now());
  }
  void handed(std::uint64_t token, std::int64_t handoff_us) {
    taken_ = backend::Acquired{token, 1, handed_at(handoff_us)};
    queued_ = false;
  }
  // True when handed the key.
  bool wait(Clock::time_point deadline);
  void leave() noexcept;

  RedisBackend& backend_;
  LockKeys keys_;
  std::string key_;
  std::string id_;
  std::string box_;
  std::optional<Pool::Lease> connection_;  // taken by the first queued attempt
  const std::string owner_;
  const std::string ttl_ms_;
  const backend::AcquireRequest request_;  // of key_ and owner_
  const std::string shared_, permits_;     // as refresh.lua takes them
  bool first_ = true;
  bool queued_ = false;          // the server may hold an entry (or an unclaimed handoff) for this waiter
  std::optional<backend::Acquired> taken_;
  // The last look that found this waiter queued: when it was sent, and the server's clock then.
  Clock::time_point seen_sent_ = Clock::now();
  std::int64_t seen_server_us_ = 0;
  Clock::time_point holder_until_;  // the holder's lease end, by that look
};

backend::AcquireResult RedisBackend::acquire(const backend::AcquireRequest& request) {
  const LockKeys keys = lock_keys(request.key);
  auto connection = take(request.key);
  const Reply reply = run(*connection, kAcquire, keys.all(), acquire_args(request, "").get(), request.key);
  return acquire_answer(request, reply.get());
}

backend::AcquireResult WaitChannel::attempt() {
  if (std::exchange(first_, false)) return backend_.acquire(request_);
  if (taken_) {
    auto acquired = *taken_;
    taken_.reset();
    return acquired;
  }
  Connection& c = connection();
  const auto sent = Clock::now();
  queued_ = true;  // from here until an answer says otherwise
  const Reply reply = backend_.run(c, kAcquire, script_keys(), backend_.acquire_args(request_, id_).get(), key_);
  auto result = acquire_answer(request_, reply.get());
  if (auto* acquired = std::get_if<backend::Acquired>(&result)) {
    queued_ = false;
    if (reply->elements > 3) acquired->sent = handed_at(integer(reply->element[3]));
    return result;
  }
  seen_sent_ = sent;
  seen_server_us_ = integer(reply->element[1]);
  holder_until_ = sent + std::get<backend::Busy>(result).retry_within;
  return result;
}

bool WaitChannel::wait(Clock::time_point deadline) {
  if (!queued_) return false;
  try {
    for (;;) {
      const auto now = Clock::now();
      const auto until = std::min({deadline, holder_until_ + milliseconds(1), now + kHeartbeat});
      if (until <= now) return false;
      const auto wait = std::max(std::chrono::ceil<milliseconds>(until - now), milliseconds(1));
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.3f", static_cast<double>(wait.count()) / 1000.0);
      const Reply popped = connection().blocking({"BLPOP", box_, seconds}, wait);
      if (!is_nil(popped.get())) {
        // [box, "token handoff_us"]
        const std::string value = text(popped->element[1]);
        const auto space = value.find(' ');
        handed(std::stoull(value.substr(0, space)), std::stoll(value.substr(space + 1)));
        return true;
      }
      const auto after = Clock::now();
      if (after >= deadline || after >= holder_until_) return false;
      // A heartbeat: the entry stays alive, and the holder's lease end is read again.
      const auto sent = Clock::now();
      const Reply reply = backend_.run(connection(), kRefresh, script_keys(),
                                       {keys_.key, owner_, ttl_ms_, id_, backend_.alive_ms(), shared_, permits_,
                                        backend_.claim_ms()},
                                       key_);
      const auto& e = reply->element;
      switch (integer(e[0])) {
        case 1:
          handed(u64(e[1]), integer(e[2]));
          return true;
        case 2:
          return false;  // free: the attempt that follows takes it or queues again
        default:
          seen_sent_ = sent;
          seen_server_us_ = integer(e[2]);
          holder_until_ = sent + milliseconds(integer(e[1]));
      }
    }
  } catch (const RedisError& e) {
    if (!e.connection) backend_.fail(e, key_, false);
    // The connection broke (a restart, a timeout). Wait for the server to answer again, up to
    // the deadline; the attempt that follows then reports its state, or that it is unreachable.
    connection_.reset();
    for (auto backoff = milliseconds(50);; backoff = std::min(backoff * 2, kHeartbeat)) {
      try {
        connection_.emplace(backend_.pool().take());
        return false;
      } catch (const RedisError&) {
        if (Clock::now() + backoff >= deadline) return false;
        std::this_thread::sleep_for(backoff);
      }
    }
  }
}

void WaitChannel::leave() noexcept {
  try {
    if (taken_) {
      // Handed over during the last wait, but the waiting call ended without claiming it.
      const auto token = taken_->token;
      taken_.reset();
      backend_.release(backend::LeaseRef{key_, owner_, token});
    }
    if (!queued_) return;
    queued_ = false;
    backend_.run(connection(), kLeave, script_keys(), {keys_.key, owner_, id_}, key_);
  } catch (...) {
    // Unreachable: the entry dies unrefreshed after kAlive, and a key handed over runs out
    // with its lease.
  }
}

std::unique_ptr<backend::Waiter> RedisBackend::waiter(const backend::AcquireRequest& request) {
  return std::make_unique<WaitChannel>(*this, request);
}

ListPage RedisBackend::list(std::string_view prefix, std::string_view after, std::size_t limit) {
  if (limit == 0) return {};
  const LexRange range = list_range(prefix, after);
  const std::size_t page_max = std::min(limit, kMaxPage);
  const std::string want = std::to_string(page_max + 1);
  const std::string cap = std::to_string(page_max + 1 + kMaxStale);
  auto connection = take(prefix);
  const Reply reply = run(*connection, kList, {store_.held}, {settings_.ns, range.min, range.max, want, cap}, prefix, false);
  ListPage page;
  std::size_t keys = 0;
  bool more = false;
  for (std::size_t row = 2; row + kRow + 2 <= reply->elements; row += kRow + 2) {
    redisReply** e = reply->element + row;
    std::string key = text(e[0]);
    if (page.locks.empty() || page.locks.back().key != key) {
      if (keys == page_max) {
        more = true;
        break;
      }
      ++keys;
    }
    page.locks.push_back(holder_info(std::move(key), e + 1, e[kRow + 1]));
  }
  if (more) {
    page.next_after = page.locks.back().key;
  } else if (integer(reply->element[0]) == 0) {
    // The scan stopped at its cap among stale entries: go on after the last one looked at.
    page.next_after = text(reply->element[1]);
  }
  return page;
}

}  // namespace
}  // namespace redis

std::shared_ptr<backend::Backend> make_redis_backend(const core::Url& url) {
  core::UrlOptions options(url);
  redis::Settings settings;
  settings.endpoint = redis::parse_endpoint(url, options);
  settings.fair = options.take_bool("fair").value_or(false);
  settings.ns = redis::take_namespace(options, url.scheme);
  options.finish();
  return std::make_shared<redis::RedisBackend>(std::move(settings));
}

}  // namespace dlock::backends
