// redlock://: Redlock over N independent Redis servers, with fencing tokens.
//
// Every operation runs one script on all servers at once: the EVALSHA goes out to each, then
// the answers are read in turn, so a round costs the slowest server's round trip, not their
// sum. The scripts are redis://'s (one server's lock: owner, hold count, token, lease judged by
// that server's clock) plus a few of lua/*.lua. An acquisition holds when a majority granted it
// within the lease's validity time (TTL minus the time taken minus clock drift); otherwise the
// grants are released and the attempt reports the key held, with a short random back-off when
// nobody holds a majority either (votes split between contenders, or a release under way).
//
// Fencing: each server draws its own token (INCR of the key's counter). The acquisition takes
// the highest one granted and, in a second round made only when the grants differ, raises the
// others to it (lua/adopt.lua), so a majority ends with that token and a counter at least as
// high. Any later acquisition's majority shares a server with it, which draws above: tokens
// rise (README, "Fencing tokens").
//
// Several keys (acquire_set) are one round of one script per server, all or none there; the set
// holds where each of its keys would hold on its own, and is given back otherwise.
//
// Waking: a waiter registers on one server and blocks in BLPOP on the key's bell there; a
// release rings the bell on every server where a waiter is registered (lua/bells.lua).

#include "backends/redlock/redlock_backend.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <utility>

#include "backends/bell_waiter.hpp"
#include "backends/redis/keys.hpp"
#include "backends/redis/sets.hpp"
#include "backends/redis/subscriber.hpp"
#include "backends/redlock/activity.hpp"
#include "backends/redlock/agreement.hpp"
#include "backends/redlock/common.hpp"
#include "backends/redlock/server_bell.hpp"
#include "backends/redlock/servers.hpp"
#include "backends/redlock/settings.hpp"

namespace dlock::backends {
namespace redlock {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using redis::integer;
using redis::is_nil;
using redis::kAlive;
using redis::kCollectBatch;
using redis::kMaxPage;
using redis::kMaxStale;
using redis::RedisError;
using redis::text;

// Redlock's allowance for servers' clocks running at different rates: 1 % of the TTL plus 2 ms.
milliseconds drift(milliseconds ttl) { return milliseconds(2) + ttl / 100; }
// How long a lease taken now stays trustworthy: answers arriving later are of no use.
milliseconds validity(milliseconds ttl) { return std::max(ttl - drift(ttl), milliseconds(1)); }

// A short random wait before the next attempt when no one holds a majority: contenders that
// split the votes spread out instead of colliding again.
milliseconds backoff(milliseconds ttl) {
  thread_local std::mt19937 random{std::random_device{}()};
  const auto most = std::clamp(ttl / 20, milliseconds(2), kMostBackoff);
  return milliseconds(std::uniform_int_distribution<milliseconds::rep>(1, most.count())(random));
}

// Every answering server's holders (rows from element `from` on), in turn.
std::vector<LockInfo> rows(const std::vector<Answer>& answers, std::string_view key, std::size_t from) {
  std::vector<LockInfo> seen;
  for (const auto& a : answers) {
    if (!a.ok()) continue;
    auto here = redis::holder_rows(std::string(key), a.reply.get(), from);
    std::move(here.begin(), here.end(), std::back_inserter(seen));
  }
  return seen;
}

class RedlockBackend final : public backend::Backend {
 public:
  explicit RedlockBackend(Settings settings);

  std::string_view name() const noexcept override { return kName; }
  backend::Capabilities capabilities() const noexcept override {
    return {.spans_processes = true,
            .holds_outlive_the_client = true,
            .records_acquisition_time = true,
            .shared_holders = true,
            .notifies_evictions = true};
  }
  backend::AcquireResult acquire(const backend::AcquireRequest& request) override;
  bool renew(const backend::LeaseRef& lease, milliseconds ttl) override;
  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override;
  std::optional<backend::AcquireSetResult> acquire_set(std::span<const backend::AcquireRequest> requests) override;
  std::optional<std::vector<std::optional<std::uint32_t>>> release_set(
      std::span<const backend::LeaseRef> leases) override;
  std::vector<LockInfo> inspect(std::string_view key) override;
  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override;
  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override;
  bool watch(std::shared_ptr<backend::Events> events) override;
  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override;
  void ping() override;
  std::size_t collect_idle() override;
  backend::ActivityLedger* activity() noexcept override { return &activity_; }

 private:
  Keys keys(std::string_view key) const { return Keys(settings_.ns, key, store_); }
  std::string new_waiter_id() { return waiter_prefix_ + "." + std::to_string(++waiters_); }
  std::vector<Answer> round(const Request& request, milliseconds timeout) { return servers_.round(request, timeout); }
  std::vector<std::optional<Args>> everyone(const Args& args) const { return servers_.everyone(args); }
  std::vector<std::optional<Args>> no_one() const { return servers_.no_one(); }
  // Servers whose grant a hold needs: a majority, but a semaphore of P >= 2 permits needs
  // N - ceil(N / (P + 1)) + 1, so that any P + 1 holders share a server, which admits at most
  // P of them (any two majorities share one, which is enough for writers and readers).
  std::size_t needed(std::uint32_t permits) const {
    const std::size_t n = servers_.size();
    return permits < 2 ? quorum_ : n - (n + permits) / (permits + 1) + 1;
  }
  std::optional<backend::Acquired> settle(const backend::AcquireRequest& request, const Keys& keys,
                                          std::vector<Grant>& grants, Clock::time_point sent);
  void undo(const backend::AcquireRequest& request, const Keys& keys, const std::vector<Grant>& grants);
  void undo_set(std::span<const backend::AcquireRequest> requests, const std::vector<std::vector<Grant>>& grants);
  // What a release round answered for one lease: its holds left, or nothing when it was no
  // longer ours. `element`: the lease's place in a set's answers (none: the answer is the lease's).
  std::optional<std::uint32_t> released(const std::vector<Answer>& answers, std::string_view key,
                                        std::optional<std::size_t> element = std::nullopt) const;
  std::vector<LockInfo> agreed(const std::vector<LockInfo>& seen, bool any = false) const {
    return redlock::agreed(seen, quorum_, any);
  }
  [[noreturn]] void no_majority(const std::vector<Answer>& answers, std::string_view key, const std::string& what,
                                std::size_t needed = 0) const {
    servers_.no_majority(answers, key, what, needed);
  }

  Settings settings_;
  Servers servers_;
  const std::size_t quorum_ = servers_.quorum();
  const redis::StoreKeys store_{settings_.ns};
  const std::string alive_ms_ = std::to_string(kAlive.count());
  const std::string waiter_prefix_ = redis::random_hex();
  std::atomic<std::uint64_t> waiters_{0};
  std::vector<std::unique_ptr<redis::Subscriber>> subscribers_;  // force-release notices, one per server
  ActivityTotals activity_{servers_, store_.activity, settings_.command_timeout};
};

RedlockBackend::RedlockBackend(Settings settings)
    : settings_(std::move(settings)), servers_(settings_.servers) {}

backend::AcquireResult RedlockBackend::acquire(const backend::AcquireRequest& request) {
  const Keys keys = this->keys(request.key);
  const redis::AcquireArgs args(request, false, "", alive_ms_, /*readers_claims=*/true);
  const std::size_t need = needed(request.permits);
  const auto sent = Clock::now();
  const auto answers = round({kAcquire, keys.with_bell(), everyone(args.get())},
                             std::min(settings_.command_timeout, validity(request.ttl)));
  auto vote = votes<backend::Acquired, backend::Busy>(
      answers, [&](const redisReply* reply) { return redis::acquire_answer(request, reply); });
  std::vector<Grant> grants;
  for (const auto& [server, acquired] : vote.grants) grants.push_back({server, acquired.token, acquired.hold_count});
  if (!vote.mismatch && grants.size() >= need) {
    if (auto acquired = settle(request, keys, grants, sent)) {
      end_readers_claims(
          servers_, [&] { return std::vector<std::string>{keys.readers}; }, grants, answers, settings_.command_timeout);
      return *acquired;
    }
  }
  undo(request, keys, grants);
  if (vote.mismatch) std::rethrow_exception(vote.mismatch);
  if (answered(answers) < need) {
    no_majority(answers, request.key,
                need > quorum_ ? "cannot take one of the " + std::to_string(request.permits) + " permits of"
                               : "cannot acquire",
                need);
  }
  return contended(vote.refusals, answered(answers), quorum_, backoff(request.ttl));
}

std::optional<backend::Acquired> RedlockBackend::settle(const backend::AcquireRequest& request, const Keys& keys,
                                                        std::vector<Grant>& grants, Clock::time_point sent) {
  // A re-entry when a majority already held the key for this owner under one token; else a
  // new acquisition under the highest token drawn.
  std::map<std::uint64_t, std::size_t> reentries;
  for (const auto& g : grants) {
    if (g.holds > 1) ++reentries[g.token];
  }
  backend::Acquired decided{0, 1};
  for (const auto& [token, count] : reentries) {
    if (count >= needed(request.permits)) decided.token = token;
  }
  if (decided.token != 0) {
    for (const auto& g : grants) {
      if (g.token == decided.token) decided.hold_count = std::max(decided.hold_count, g.holds);
    }
  } else {
    for (const auto& g : grants) decided.token = std::max(decided.token, g.token);
  }
  // Servers that answered otherwise take the decision (lua/adopt.lua).
  const std::string token = std::to_string(decided.token);
  const std::string holds = std::to_string(decided.hold_count);
  std::vector<std::string> here(servers_.size());
  Request adopt{kAdopt, {keys.lock.lock, keys.lock.seq}, no_one()};
  std::size_t agreeing = 0;
  for (const auto& g : grants) {
    if (g.token == decided.token && g.holds == decided.hold_count) {
      ++agreeing;
      continue;
    }
    here[g.server] = std::to_string(g.token);
    adopt.args[g.server] = Args{request.owner, here[g.server], token, holds};
  }
  if (agreeing < grants.size()) {
    const auto left = validity(request.ttl) - std::chrono::ceil<milliseconds>(Clock::now() - sent);
    const auto answers = round(adopt, std::min(settings_.command_timeout, std::max(left, milliseconds(1))));
    for (auto& g : grants) {
      if (!adopt.args[g.server] || !answers[g.server].ok() || integer(answers[g.server].reply.get()) != 1) continue;
      g.token = decided.token;
      g.holds = decided.hold_count;
      ++agreeing;
    }
  }
  if (agreeing < needed(request.permits) || Clock::now() - sent >= validity(request.ttl)) return std::nullopt;
  // A server that kept its own token (another reader there drew the decided one) holds what no
  // renewal or release of this lease reaches: give it back, or it would refuse writers there
  // until its lease ran out.
  std::vector<Grant> strays;
  for (const auto& g : grants) {
    if (g.token != decided.token) strays.push_back(g);
  }
  undo(request, keys, strays);
  return decided;
}

void RedlockBackend::undo(const backend::AcquireRequest& request, const Keys& keys, const std::vector<Grant>& grants) {
  if (grants.empty()) return;
  std::vector<std::string> tokens(servers_.size());
  Request release{kRelease, keys.with_bell(), no_one()};
  for (const auto& g : grants) {
    tokens[g.server] = std::to_string(g.token);
    release.args[g.server] = Args{request.key, request.owner, tokens[g.server], "0"};
  }
  // A grant this cannot reach runs out with its lease.
  round(release, settings_.command_timeout);
}

bool RedlockBackend::renew(const backend::LeaseRef& lease, milliseconds ttl) {
  const Keys keys = this->keys(lease.key);
  const std::string token = std::to_string(lease.token);
  const std::string ttl_ms = std::to_string(ttl.count());
  const auto answers = round({kRenew, {keys.lock.lock}, everyone({lease.owner, token, ttl_ms})},
                             std::min(settings_.command_timeout, validity(ttl)));
  // renew.lua answers 1 + the holder's permits: a semaphore's holder needs as many servers as
  // its acquisition did.
  std::size_t renewed = 0, refused = 0;
  std::int64_t permits = 0;
  for (const auto& a : answers) {
    if (!a.ok()) continue;
    const auto answer = integer(a.reply.get());
    ++(answer >= 1 ? renewed : refused);
    permits = std::max(permits, answer - 1);
  }
  const std::size_t need = needed(static_cast<std::uint32_t>(permits));
  if (renewed >= need) return true;
  if (refused > servers_.size() - need) return false;  // out of reach
  no_majority(answers, lease.key, "cannot renew", need);
}

std::optional<std::uint32_t> RedlockBackend::release(const backend::LeaseRef& lease) {
  const Keys keys = this->keys(lease.key);
  const std::string token = std::to_string(lease.token);
  const auto answers =
      round({kRelease, keys.with_bell(), everyone({lease.key, lease.owner, token, alive_ms_})}, settings_.command_timeout);
  return released(answers, lease.key);
}

std::optional<std::uint32_t> RedlockBackend::released(const std::vector<Answer>& answers, std::string_view key,
                                                      std::optional<std::size_t> element) const {
  std::size_t released = 0, refused = 0;
  std::uint32_t left = 0;
  for (const auto& a : answers) {
    if (!a.ok()) continue;
    const auto holds = redis::holds_left(element ? a.reply->element[*element] : a.reply.get());
    if (!holds) {
      ++refused;
    } else {
      ++released;
      left = std::max(left, *holds);
    }
  }
  if (released >= quorum_) return left;
  if (refused > servers_.size() - quorum_) return std::nullopt;
  no_majority(answers, key, "cannot release");
}

// A set is one script per server (redis://'s lua/acquire_set.lua), all or none there; the set
// holds when enough servers granted all of it within the validity time, each key then agreeing
// on its token as acquire() does. Each key is held by those servers, as its own acquire() would
// need. Otherwise every server's grant is released.
std::optional<backend::AcquireSetResult> RedlockBackend::acquire_set(std::span<const backend::AcquireRequest> requests) {
  auto ttl = milliseconds::max();
  std::size_t need = 0;
  for (const auto& r : requests) {
    ttl = std::min(ttl, r.ttl);
    need = std::max(need, needed(r.permits));
  }
  const auto call = redis::SetCall::acquire(settings_.ns, store_, requests, false, /*readers_claims=*/true);
  const auto sent = Clock::now();
  const auto answers =
      round({kAcquireSet, call.keys(), everyone(call.args())}, std::min(settings_.command_timeout, validity(ttl)));
  auto vote = votes<std::vector<backend::Acquired>, backend::SetBusy>(
      answers, [&](const redisReply* reply) { return redis::acquire_set_answer(requests, reply); });
  std::vector<std::vector<Grant>> grants(requests.size());  // per key, the servers that granted the set
  for (const auto& [server, set] : vote.grants) {
    for (std::size_t k = 0; k < set.size(); ++k) grants[k].push_back({server, set[k].token, set[k].hold_count});
  }
  // The first key refused (by a server, or short of agreeing on its token).
  std::size_t index = requests.size();
  if (!vote.mismatch && grants.front().size() >= need) {
    std::vector<backend::Acquired> decided;
    for (std::size_t k = 0; k < requests.size(); ++k) {
      auto acquired = settle(requests[k], keys(requests[k].key), grants[k], sent);
      if (!acquired) {
        index = k;
        break;
      }
      decided.push_back(*acquired);
    }
    if (index == requests.size() && Clock::now() - sent < validity(ttl)) {
      // Each server granted all of the set or none of it.
      const auto claims = [&] {
        std::vector<std::string> names;
        for (const auto& r : requests) names.push_back(keys(r.key).readers);
        return names;
      };
      end_readers_claims(servers_, claims, grants.front(), answers, settings_.command_timeout);
      return decided;
    }
  }
  undo_set(requests, grants);
  if (vote.mismatch) std::rethrow_exception(vote.mismatch);
  if (answered(answers) < need) no_majority(answers, requests.front().key, "cannot acquire", need);
  for (const auto& r : vote.refusals) index = std::min(index, r.index);
  std::vector<backend::Busy> busy;
  for (auto& r : vote.refusals) {
    if (r.index == index) busy.push_back(std::move(r.busy));
  }
  return backend::SetBusy{index, contended(busy, answered(answers), quorum_, backoff(ttl))};
}

void RedlockBackend::undo_set(std::span<const backend::AcquireRequest> requests,
                              const std::vector<std::vector<Grant>>& grants) {
  if (grants.front().empty()) return;
  // Each server's grant, with the tokens it has now.
  std::vector<redis::SetCall> calls;
  calls.reserve(grants.front().size());
  Request release{kReleaseSet, {}, no_one()};
  for (std::size_t g = 0; g < grants.front().size(); ++g) {
    std::vector<backend::LeaseRef> leases;
    for (std::size_t k = 0; k < requests.size(); ++k) leases.push_back({requests[k].key, requests[k].owner, grants[k][g].token});
    const auto& call = calls.emplace_back(redis::SetCall::release(settings_.ns, store_, leases, "0"));
    release.args[grants.front()[g].server] = call.args();
  }
  release.keys = calls.front().keys();
  // A grant this cannot reach runs out with its lease.
  round(release, settings_.command_timeout);
}

std::optional<std::vector<std::optional<std::uint32_t>>> RedlockBackend::release_set(
    std::span<const backend::LeaseRef> leases) {
  const auto call = redis::SetCall::release(settings_.ns, store_, leases, alive_ms_);
  const auto answers = round({kReleaseSet, call.keys(), everyone(call.args())}, settings_.command_timeout);
  std::vector<std::optional<std::uint32_t>> left;
  for (std::size_t i = 0; i < leases.size(); ++i) left.push_back(released(answers, leases[i].key, i));
  return left;
}

std::vector<LockInfo> RedlockBackend::inspect(std::string_view key) {
  const Keys keys = this->keys(key);
  const auto answers = round({kInspect, {keys.lock.lock, keys.lock.queue}, everyone({})}, settings_.command_timeout);
  if (answered(answers) < quorum_) no_majority(answers, key, "cannot inspect");
  return agreed(rows(answers, key, 1));
}

std::vector<LockInfo> RedlockBackend::force_release(std::string_view key, Eviction eviction,
                                                    std::optional<std::uint64_t> token) {
  const Keys keys = this->keys(key);
  const std::string_view delayed = eviction == Eviction::delayed ? "1" : "0";
  const std::string holder_token = token ? std::to_string(*token) : std::string();
  const auto answers = round(
      {kForceRelease, keys.with_bell(), everyone({key, alive_ms_, delayed, store_.evicted, holder_token})},
      settings_.command_timeout);
  // Short of a majority the holder may keep the lock on the others until its lease ends.
  if (answered(answers) < quorum_) no_majority(answers, key, "cannot force-release");
  return agreed(rows(answers, key, 0), true);
}

bool RedlockBackend::watch(std::shared_ptr<backend::Events> events) {
  const auto evicted = [events = std::move(events)](std::string_view key) { events->evicted(key); };
  // Every server publishes its force-releases: a notice reaches the holder while any one of
  // them it subscribed to answers (a notice more than once costs a spurious check).
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    subscribers_.push_back(std::make_unique<redis::Subscriber>(servers_.endpoint(i), store_.evicted, evicted));
  }
  // Each waits for its first try; they run at once, so a server down costs one timeout.
  std::size_t accepting = 0;
  for (const auto& subscriber : subscribers_) accepting += subscriber->accepted() ? 1 : 0;
  if (accepting > 0) return true;
  subscribers_.clear();
  return false;
}

ListPage RedlockBackend::list(std::string_view prefix, std::string_view after, std::size_t limit) {
  if (limit == 0) return {};
  const auto range = redis::list_range(prefix, after);
  const std::size_t page_max = std::min(limit, kMaxPage);
  const std::string want = std::to_string(page_max + 1);
  const std::string cap = std::to_string(page_max + 1 + kMaxStale);
  const auto answers =
      round({kList, {store_.held}, everyone({settings_.ns, range.min, range.max, want, cap})}, settings_.command_timeout);
  if (answered(answers) < quorum_) no_majority(answers, prefix, "cannot list");
  // Each server looked through the range up to some key, or to its end: locks are decided up
  // to the first of those keys, and the next page starts after it.
  std::optional<std::string> looked_to;
  std::map<std::string, std::vector<LockInfo>> seen;
  for (const auto& a : answers) {
    if (!a.ok()) continue;
    const redisReply* reply = a.reply.get();
    for (std::size_t row = 2; row + redis::kRow + 2 <= reply->elements; row += redis::kRow + 2) {
      redisReply** e = reply->element + row;
      const std::string key = text(e[0]);
      seen[key].push_back(redis::holder_info(key, e + 1));
    }
    if (integer(reply->element[0]) == 0) {
      const std::string last = text(reply->element[1]);
      if (!looked_to || last < *looked_to) looked_to = last;
    }
  }
  ListPage page;
  std::size_t keys = 0;
  for (const auto& [key, infos] : seen) {
    if (looked_to && key > *looked_to) break;
    auto holders = agreed(infos);
    if (holders.empty()) continue;
    if (keys++ == page_max) {
      page.next_after = page.locks.back().key;
      return page;
    }
    std::move(holders.begin(), holders.end(), std::back_inserter(page.locks));
  }
  if (looked_to) page.next_after = *looked_to;
  return page;
}

void RedlockBackend::ping() {
  const auto answers = round({std::nullopt, {}, everyone({"PING"})}, settings_.command_timeout);
  if (answered(answers) < quorum_) no_majority(answers, {}, "cannot reach its servers");
}

std::size_t RedlockBackend::collect_idle() {
  // Server by server: each keeps its own counters rising (lua/collect.lua).
  std::size_t removed = 0;
  std::vector<Answer> answers(servers_.size());
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    std::size_t here = 0;
    try {
      auto connection = servers_.take(i);
      const std::string batch = std::to_string(kCollectBatch);
      for (std::string from = "-";;) {
        answers[i].reply = servers_.run(*connection, kCollect, {store_.known, store_.held}, {settings_.ns, from, batch});
        const auto& e = answers[i].reply->element;
        here += redis::u64(e[0]);
        if (integer(e[1]) == 1) break;
        from = redis::lex_bound('(', text(e[2]));
      }
    } catch (const RedisError& e) {
      answers[i].reply.reset();
      answers[i].error = e;
    }
    removed = std::max(removed, here);
  }
  if (answered(answers) == 0) no_majority(answers, {}, "cannot collect idle keys");
  return removed;
}

std::unique_ptr<backend::Waiter> RedlockBackend::waiter(const backend::AcquireRequest& request) {
  auto bell = std::make_unique<ServerBell>(servers_, keys(request.key), new_waiter_id(), alive_ms_);
  return std::make_unique<BellWaiter>(*this, request, std::move(bell));
}

}  // namespace
}  // namespace redlock

std::shared_ptr<backend::Backend> make_redlock_backend(const core::Url& url) {
  return std::make_shared<redlock::RedlockBackend>(redlock::parse_settings(url));
}

}  // namespace dlock::backends
