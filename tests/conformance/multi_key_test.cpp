// The conformance suite's multi-key cases (dlock/multi_lock.hpp): the canonical order, all or
// nothing, a waiter that holds nothing while it sleeps, tokens per key, the loss of one key as
// the loss of the set, re-entry, the standard lock types and bad input, on every backend.
// Exclusion is judged from outside the library: counter files updated under the lock lose no
// update and see every key's tokens rise.

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "conformance/conformance_fixture.hpp"
#include "support/child_process.hpp"
#include "support/holders.hpp"

using namespace std::chrono_literals;

namespace dlock::test {
namespace {

class MultiKey : public BackendTest {};

// How often each of two processes takes its pair of keys. The pairs are given in opposite
// orders; a lock that took them as given would deadlock or livelock within a few rounds (300
// rounds: 1000 cost 20 to 45 s per store under asan).
constexpr int kPairIterations = 300;

long long counter_value(const std::string& path) {
  const auto text = read_file(path);
  if (!text) return -1;
  long long count = -1;
  std::istringstream(*text) >> count;
  return count;
}

TEST_P(MultiKey, OppositeOrdersInTwoProcessesNeitherDeadlockNorOverlap) {
  if (!spans_processes()) GTEST_SKIP() << GetParam().name << " locks live in one process";
  const std::string a = key("a"), b = key("b");
  const std::string file_a = (temp_dir() / "a").string(), file_b = (temp_dir() / "b").string();
  write_file_atomically(file_a, "0 0\n");
  write_file_atomically(file_b, "0 0\n");
  const std::string iterations = std::to_string(kPairIterations);
  std::vector<ChildProcess> workers;
  workers.emplace_back(std::vector<std::string>{DLOCK_CONFORMANCE_WORKER, "pair", url(), iterations, a, file_a, b, file_b});
  workers.emplace_back(std::vector<std::string>{DLOCK_CONFORMANCE_WORKER, "pair", url(), iterations, b, file_b, a, file_a});
  for (auto& worker : workers) {
    const auto status = worker.wait_for(100s);
    ASSERT_TRUE(status) << "worker " << worker.pid() << " did not finish in 100 s: deadlocked or livelocked";
    EXPECT_EQ(*status, 0) << "worker " << worker.pid()
                          << " failed (3: a key's fencing token went backwards, 4: I/O, 5: dlock error)";
  }
  EXPECT_EQ(counter_value(file_a), 2 * kPairIterations) << "updates of a were lost: two holders at once";
  EXPECT_EQ(counter_value(file_b), 2 * kPairIterations) << "updates of b were lost: two holders at once";
  Client client = open();
  EXPECT_TRUE(client.inspect(a).empty());
  EXPECT_TRUE(client.inspect(b).empty());
}

// The same in one process, for every backend: two threads, two sets in opposite orders, and a
// third thread locking one of the keys alone.
TEST_P(MultiKey, OppositeOrdersInThreadsNeitherDeadlockNorOverlap) {
  constexpr int kIterations = 100;
  Client client = open();
  const std::string a = key("a"), b = key("b");
  std::atomic<int> inside_a{0}, inside_b{0}, overlaps{0};
  long long count_a = 0, count_b = 0;
  std::uint64_t last_a = 0, last_b = 0;
  std::atomic<int> token_regressions{0};
  const auto enter = [&](std::atomic<int>& inside, long long& count, std::uint64_t& last, std::uint64_t token) {
    if (inside.fetch_add(1) != 0) ++overlaps;
    if (token <= last) ++token_regressions;
    last = token;
    const long long seen = count;
    std::this_thread::yield();
    count = seen + 1;
    inside.fetch_sub(1);
  };
  const auto pair = [&](std::vector<std::string> keys) {
    MultiMutex both = client.multi_mutex(keys);
    for (int i = 0; i < kIterations; ++i) {
      std::lock_guard guard(both);
      enter(inside_a, count_a, last_a, both.lease()->token(a));
      enter(inside_b, count_b, last_b, both.lease()->token(b));
    }
  };
  const auto single = [&] {
    Mutex only = client.mutex(b);
    for (int i = 0; i < kIterations; ++i) {
      std::lock_guard guard(only);
      enter(inside_b, count_b, last_b, only.lease()->token());
    }
  };
  auto first = std::async(std::launch::async, pair, std::vector<std::string>{a, b});
  auto second = std::async(std::launch::async, pair, std::vector<std::string>{b, a});
  auto third = std::async(std::launch::async, single);
  for (auto* done : {&first, &second, &third}) {
    ASSERT_EQ(done->wait_for(100s), std::future_status::ready) << "deadlocked or livelocked";
    done->get();
  }
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(token_regressions.load(), 0);
  EXPECT_EQ(count_a, 2 * kIterations);
  EXPECT_EQ(count_b, 3 * kIterations);
}

TEST_P(MultiKey, AllOrNothing) {
  Client client = open();
  Client other = open();
  const std::string a = key("a"), b = key("b"), c = key("c");
  Lease blocker = other.acquire(b, {.ttl = 10s});
  MultiAttempt attempt = client.try_acquire_all({c, a, b});
  ASSERT_FALSE(attempt) << "a set with a busy key was taken";
  EXPECT_EQ(attempt.busy_key(), b);
  const auto holder = sole_holder(attempt.holders());
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->owner, blocker.owner());
  EXPECT_TRUE(other.inspect(a).empty()) << "a failed multi-key attempt kept a key it took";
  EXPECT_TRUE(other.inspect(c).empty()) << "a failed multi-key attempt took a key after the busy one";
  EXPECT_THROW(attempt.lease(), std::logic_error);

  const auto start = Clock::now();
  MultiAttempt bounded = client.try_acquire_all_for({a, b}, 300ms);
  EXPECT_FALSE(bounded);
  EXPECT_GE(Clock::now() - start, 300ms);
  EXPECT_TRUE(other.inspect(a).empty());
}

// While a call waits for a busy key it holds none of the others: anyone may take them.
TEST_P(MultiKey, WaiterHoldsNothingWhileItSleeps) {
  Client client = open();
  Client other = open();
  Client third = open();
  const std::string a = key("a"), b = key("b");
  auto blocker = std::make_optional(other.acquire(b, {.ttl = 10s}));
  auto waiter = std::async(std::launch::async, [&] { return client.try_acquire_all_for({a, b}, 30s); });
  ASSERT_EQ(waiter.wait_for(300ms), std::future_status::timeout) << "the set was taken while b was held";
  // Its first attempt takes a, finds b busy and gives a back (on a loaded machine that attempt
  // may still be under way now); then it sleeps, and a stays free to others.
  ASSERT_TRUE(eventually([&] { return static_cast<bool>(third.try_acquire(a)); }, 10s))
      << "a waiting multi-key call kept a while it slept";
  for (int i = 0; i < 2; ++i) {
    Attempt meanwhile = third.try_acquire(a);
    ASSERT_TRUE(meanwhile) << "a waiting multi-key call took a again while it slept";
  }
  blocker.reset();
  ASSERT_EQ(waiter.wait_for(20s), std::future_status::ready) << "the waiter was not woken by b's release";
  MultiAttempt result = waiter.get();
  ASSERT_TRUE(result);
  EXPECT_TRUE(result.lease().held());
  for (const std::string& k : {a, b}) {
    const auto holder = sole_holder(other.inspect(k));
    ASSERT_TRUE(holder) << k;
    EXPECT_EQ(holder->owner, result.lease().lease(k).owner()) << k;
  }
}

TEST_P(MultiKey, KeysSortedDuplicatesFoldedTokensPerKey) {
  Client client = open();
  Client other = open();
  const std::string a = key("a"), b = key("b");
  MultiLease both = client.acquire_all({b, a, b});
  EXPECT_EQ(both.keys(), (std::vector<std::string>{a, b}));
  ASSERT_EQ(both.leases().size(), 2u);
  EXPECT_TRUE(both.held());
  EXPECT_FALSE(both.lost());
  for (const std::string& k : {a, b}) {
    const auto holder = sole_holder(other.inspect(k));
    ASSERT_TRUE(holder) << k;
    EXPECT_EQ(holder->token, both.token(k)) << "each key keeps its own token: " << k;
  }
  EXPECT_THROW(both.lease(key("c")), std::out_of_range);
  const std::uint64_t first_a = both.token(a), first_b = both.token(b);
  both.release();
  EXPECT_TRUE(other.inspect(a).empty());
  EXPECT_TRUE(other.inspect(b).empty());
  EXPECT_NO_THROW(both.release()) << "a second release must be a no-op";
  MultiLease again = other.acquire_all({a, b});
  EXPECT_GT(again.token(a), first_a);
  EXPECT_GT(again.token(b), first_b);
}

// A re-entry by the same owner re-enters every key and extends every lease.
TEST_P(MultiKey, ReentryReentersEveryKey) {
  Client client = open();
  Client other = open();
  const std::string a = key("a"), b = key("b");
  MultiLease first = client.acquire_all({a, b}, {.ttl = 2s});
  const auto before_a = first.lease(a).valid_until(), before_b = first.lease(b).valid_until();
  std::this_thread::sleep_for(600ms);
  MultiLease second = client.acquire_all({b, a}, {.ttl = 2s});
  for (const std::string& k : {a, b}) {
    EXPECT_EQ(second.token(k), first.token(k)) << k;
    EXPECT_EQ(second.lease(k).hold_count(), 2u) << k;
  }
  // Without the extension the leases would end where they did.
  EXPECT_GE(ms(first.lease(a).valid_until() - before_a), 600) << "the re-entry did not extend a's lease";
  EXPECT_GE(ms(first.lease(b).valid_until() - before_b), 600) << "the re-entry did not extend b's lease";
  second.release();
  EXPECT_FALSE(other.inspect(a).empty()) << "one of two holds released the key";
  first.release();
  EXPECT_TRUE(other.inspect(a).empty());
  EXPECT_TRUE(other.inspect(b).empty());
}

// The loss of one key is the loss of the set: its stop token fires, its callbacks run once.
TEST_P(MultiKey, LossOfOneKeyIsTheLossOfTheSet) {
  Client client = open();
  Client admin = open();
  const std::string a = key("a"), b = key("b");
  MultiLease both = client.acquire_all({a, b}, {.ttl = 3s, .auto_renew = true});
  std::promise<LossInfo> lost;
  std::atomic<int> callbacks{0};
  both.on_lost([&](const LossInfo& info) {
    if (callbacks++ == 0) lost.set_value(info);
  });
  ASSERT_TRUE(sole_holder(admin.force_release(b, Eviction::immediate)));
  auto future = lost.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready) << "the set was never told of b's loss";
  EXPECT_EQ(future.get().key, b);
  EXPECT_TRUE(both.lost());
  EXPECT_FALSE(both.held());
  EXPECT_TRUE(both.stop_token().stop_requested());
  bool late = false;
  both.on_lost([&](const LossInfo&) { late = true; });
  EXPECT_TRUE(late) << "a callback registered after the loss must run at once";
  EXPECT_THROW(both.release(), LockLostError);
  EXPECT_EQ(callbacks.load(), 1);
  EXPECT_TRUE(admin.inspect(a).empty()) << "the release of a lost set kept its other key";
}

// A set's leases share one deadline task: each lease still ends at its own deadline, and a key
// re-entered by another hold keeps its deadline after the set is released.
TEST_P(MultiKey, EveryLeaseOfASetEndsAtItsDeadline) {
  Client client = open();
  const std::string a = key("a"), b = key("b"), c = key("c");
  MultiLease both = client.acquire_all({a, b}, {.ttl = 300ms});
  ASSERT_TRUE(eventually([&] { return both.stop_token().stop_requested(); }, 10s)) << "the set outlived its TTL";
  EXPECT_TRUE(eventually([&] { return both.lease(a).lost() && both.lease(b).lost(); }, 10s));
  EXPECT_THROW(both.release(), LockLostError);

  MultiLease set = client.acquire_all({a, c}, {.ttl = 2s});
  Lease again = client.acquire(a, {.ttl = 2s});  // a re-entry: the same acquisition as the set's
  ASSERT_EQ(again.hold_count(), 2u);
  set.release();
  EXPECT_TRUE(eventually([&] { return again.stop_token().stop_requested(); }, 10s))
      << "a hold that outlived its set was never ended at its deadline";
}

TEST_P(MultiKey, StdUniqueLockAndTimedTryLock) {
  Client client = open();
  Client other = open();
  const std::string a = key("a"), b = key("b");
  MultiMutex both = client.multi_mutex({b, a});
  EXPECT_EQ(both.keys(), (std::vector<std::string>{a, b}));
  const auto held = [&](const std::string& k) { return !other.inspect(k).empty(); };
  {
    std::unique_lock lock(both);
    EXPECT_TRUE(held(a) && held(b));
    ASSERT_NE(both.lease(), nullptr);
    lock.unlock();
    EXPECT_FALSE(held(a) || held(b));
    EXPECT_EQ(both.lease(), nullptr);
  }
  {
    Lease blocker = other.acquire(b, {.ttl = 10s});
    std::unique_lock timed(both, 100ms);
    EXPECT_FALSE(timed.owns_lock());
    EXPECT_FALSE(held(a));
    EXPECT_EQ(both.last_busy_key(), b);
    const auto holder = sole_holder(both.last_holders());
    ASSERT_TRUE(holder);
    EXPECT_EQ(holder->owner, blocker.owner());
  }
  std::unique_lock retry(both, std::try_to_lock);
  EXPECT_TRUE(retry.owns_lock());
}

// Backend::acquire_set and release_set, where a store offers them: one attempt at the whole
// set, all or none, seen from outside through inspect().
TEST_P(MultiKey, ASetInOneRequestIsAllOrNothing) {
  auto backend = open_backend();
  const std::string a = prepared(key("a")), b = prepared(key("b")), c = prepared(key("c"));
  const std::string me = "set-owner-" + run_id(), other = "other-owner-" + run_id();
  const auto request = [&](const std::string& k, const std::string& owner) {
    return backend::AcquireRequest{k, owner, std::chrono::milliseconds(10'000)};
  };
  const std::vector<backend::AcquireRequest> set{request(a, me), request(b, me), request(c, me)};
  auto blocker = backend->acquire(request(b, other));
  ASSERT_TRUE(std::holds_alternative<backend::Acquired>(blocker));
  const auto busy = backend->acquire_set(set);
  if (!busy) GTEST_SKIP() << GetParam().name << " takes a set one key at a time";
  const auto* refused = std::get_if<backend::SetBusy>(&*busy);
  ASSERT_NE(refused, nullptr) << "a set with a busy key was granted";
  EXPECT_EQ(refused->index, 1u);
  ASSERT_EQ(refused->busy.holders.size(), 1u);
  EXPECT_EQ(refused->busy.holders[0].owner, other);
  EXPECT_TRUE(backend->inspect(a).empty()) << "the set kept a key it took before the busy one";
  EXPECT_TRUE(backend->inspect(c).empty());

  ASSERT_EQ(backend->release({b, other, std::get<backend::Acquired>(blocker).token}), 0u);
  const auto granted = backend->acquire_set(set);
  ASSERT_TRUE(granted);
  const auto* leases = std::get_if<std::vector<backend::Acquired>>(&*granted);
  ASSERT_NE(leases, nullptr) << "a free set was refused";
  ASSERT_EQ(leases->size(), 3u);
  std::vector<backend::LeaseRef> refs;
  for (std::size_t i = 0; i < set.size(); ++i) {
    const auto holders = backend->inspect(set[i].key);
    ASSERT_EQ(holders.size(), 1u);
    EXPECT_EQ(holders[0].owner, me);
    EXPECT_EQ(holders[0].token, (*leases)[i].token);
    refs.push_back({set[i].key, me, (*leases)[i].token});
  }
  const auto released = backend->release_set(refs);
  if (released) {
    EXPECT_EQ(*released, (std::vector<std::optional<std::uint32_t>>{0u, 0u, 0u}));
  } else {
    for (const auto& ref : refs) EXPECT_EQ(backend->release(ref), 0u);
  }
  for (const auto& k : {a, b, c}) EXPECT_TRUE(backend->inspect(k).empty()) << k;
}

TEST_P(MultiKey, BadInputBeforeAnyRoundTrip) {
  Client client = open();
  Client other = open();
  const std::string a = key("a");
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.acquire_all({}); }, {"key"}, {"at least one"}));
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.multi_mutex({}); }, {"key"}, {"at least one"}));
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.try_acquire_all({a, ""}); }, {"key"}, {"empty"}));
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.try_acquire_all_for({a, "x\ny"}, 10ms); }, {"key"},
                                             {"0x0a", "newline"}));
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.multi_mutex({a, std::string(5000, 'k')}); }, {"key"},
                                             {"5000", "long"}));
  EXPECT_TRUE(other.inspect(a).empty()) << "a call with a bad key took a good one";
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backends, MultiKey, ::testing::ValuesIn(all_backends()), BackendParamName());

}  // namespace dlock::test
