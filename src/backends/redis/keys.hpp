#pragma once

// What redis:// and redlock:// share above the connection: the keys of a lock (lua/common.lua
// lays them out), reading the scripts' answers, the namespace option and list's key ranges.

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/url.hpp"
#include "dlock/backend.hpp"
#include "dlock/types.hpp"

namespace dlock::backends::redis {

// A waiter refreshes its entry (its queue entry, or Redlock's registration) at least every
// kHeartbeat while it sleeps, and the server drops an entry not refreshed for kAlive: a
// killed waiter is passed over after that.
inline constexpr std::chrono::milliseconds kHeartbeat{1'000};
inline constexpr std::chrono::milliseconds kAlive{3'000};
// Locks one list call returns and stale index entries it looks at, at most, and keys one
// collect call looks at: a script blocks the server while it runs.
inline constexpr std::size_t kMaxPage = 1'000;
inline constexpr std::size_t kMaxStale = 1'000;
inline constexpr std::size_t kCollectBatch = 256;

// The default namespace: the first part of every key dlock writes.
inline const std::string kDefaultNamespace = "dlock";

// The namespace= option of `options` (1–64 letters, digits, '_', '-', '.'), or the default.
// Throws ConfigurationError naming the rule.
std::string take_namespace(core::UrlOptions& options, const std::string& scheme);

// The keys of one lock and the store's indexes, as the scripts take them (KEYS[1..6]).
class LockKeys {
 public:
  LockKeys(const std::string& ns, std::string_view key_, const std::string& held, const std::string& known)
      : key(key_), lock(ns + ":{" + std::string(key_) + "}"), seq(lock + ":seq"), queue(lock + ":q"),
        waiters(lock + ":qi"), held_(held), known_(known) {}
  std::vector<std::string_view> all() const { return {lock, seq, queue, waiters, held_, known_}; }
  // The lock's own keys, without the indexes: a set script's KEYS per lock (sets.hpp).
  std::vector<std::string_view> own() const { return {lock, seq, queue, waiters}; }
  // redis://'s waiter box; redlock://'s sleepers, bell and readers' claim.
  std::string box(const std::string& waiter) const { return lock + ":w:" + waiter; }
  std::string sleepers() const { return lock + ":sl"; }
  std::string bell() const { return lock + ":bell"; }
  std::string readers() const { return lock + ":rc"; }

  std::string_view key;
  std::string lock, seq, queue, waiters;

 private:
  const std::string& held_;
  const std::string& known_;
};

// The store-wide keys of a namespace.
struct StoreKeys {
  explicit StoreKeys(const std::string& ns)
      : held(ns + ":held"), known(ns + ":keys"), activity(ns + ":activity"), evicted(ns + ":evicted") {}
  std::string held;      // sorted set of keys that may be held, for list
  std::string known;     // sorted set of keys with a counter, for collect_idle
  std::string activity;  // hash of the activity totals
  std::string evicted;   // the channel a force-release publishes its key on
};

// The names of the activity hash's fields (add_activity.lua's order) and the values of a delta.
inline constexpr const char* kActivityFields[] = {"acquisitions", "conflicts", "waits", "wait_us", "renewals", "losses"};
std::vector<std::string> activity_counts(const Activity& delta);
// Adds an HMGET reply of kActivityFields to `total`.
void add_activity_reply(const redisReply* reply, Activity& total);

// ZRANGEBYLEX bounds of list(prefix, after): min and max.
struct LexRange {
  std::string min, max;
};
LexRange list_range(std::string_view prefix, std::string_view after);
// A ZRANGEBYLEX bound: '[' inclusive, '(' exclusive.
std::string lex_bound(char kind, std::string_view key);

// 16 random hex digits: tells this process's waiter ids from other processes'.
std::string random_hex();

std::uint64_t u64(const redisReply* reply);

// The scripts' rows of holders (lua/holders.lua): owner, token, holds (0: evicted with a lock
// delay), pttl_ms, held_ms, shared (1 or 0).
inline constexpr std::size_t kRow = 6;
LockInfo holder_info(std::string key, redisReply* const* row, const redisReply* waiters = nullptr);
// The rows of `reply` from element `from` on.
std::vector<LockInfo> holder_rows(const std::string& key, const redisReply* reply, std::size_t from);

// The ARGV of acquire.lua for a request (its numbers owned here). `readers_claims`: the store
// keeps the readers' claim (redlock://; lua/holders.lua).
class AcquireArgs {
 public:
  AcquireArgs(const backend::AcquireRequest& request, bool fair, std::string_view waiter, const std::string& alive_ms,
              bool readers_claims);
  std::vector<std::string_view> get() const;

 private:
  const backend::AcquireRequest& request_;
  std::string ttl_ms_, permits_, claim_ms_;
  bool fair_, readers_claims_;
  std::string_view waiter_;
  const std::string& alive_ms_;
};

// acquire.lua's answer: Acquired (its token and holds), or Busy with the holders and when to
// look again. Throws InvalidArgument, naming both counts, when the key's shared holders have
// other permits than the request.
backend::AcquireResult acquire_answer(const backend::AcquireRequest& request, const redisReply* reply);

}  // namespace dlock::backends::redis
