// The conformance suite: the semantics every backend provides (PRODUCT.md, "Semantics every
// backend provides"), checked the same way on every backend. Built-in backends run always;
// real servers run when named in DLOCK_TEST_URLS (see support/backend_params.hpp).
//
// Test names read Backends/Conformance.<Case>/<backend>; run one backend with
// --gtest_filter='*/sqlite'. Multi-process cases run conformance_worker and are skipped on
// backends whose locks live in one process (local://).

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <sstream>
#include <stop_token>
#include <thread>
#include <vector>

#include "conformance/conformance_fixture.hpp"
#include "support/child_process.hpp"
#include "support/holders.hpp"

using namespace std::chrono_literals;

namespace dlock::test {
namespace {

class Conformance : public BackendTest {};

#define DLOCK_SKIP_UNLESS_MULTI_PROCESS()                                                    \
  do {                                                                                       \
    if (!spans_processes()) GTEST_SKIP() << GetParam().name << " locks live in one process"; \
  } while (0)

// Waits for a worker's ready file; empty when it did not appear in time or the worker died.
std::string wait_for_ready(ChildProcess& worker, const std::string& path, std::chrono::milliseconds timeout) {
  std::string text;
  eventually(
      [&] {
        if (auto content = read_file(path)) {
          text = *content;
          return true;
        }
        return worker.wait_for(0ms).has_value();
      },
      timeout);
  return text;
}

// A worker process holding `key` with an auto-renewed lease of `ttl_ms`, as it reported it.
struct WorkerHolder {
  ChildProcess process;
  std::uint64_t token = 0;
  std::string owner;
};

WorkerHolder start_holder(const std::string& url, const std::string& key, long ttl_ms,
                          const std::string& ready) {
  WorkerHolder holder{ChildProcess({DLOCK_CONFORMANCE_WORKER, "hold", url, key, std::to_string(ttl_ms), ready})};
  const std::string text = wait_for_ready(holder.process, ready, 30s);
  std::istringstream(text) >> holder.token >> holder.owner;
  return holder;
}

// ---- Mutual exclusion ----

// A read-sleep-write of a shared counter inside the lock loses no update, and every
// acquisition's fencing token is above the one before it.
TEST_P(Conformance, MutualExclusionThreads) {
  constexpr int kThreads = 8;
  constexpr int kIterations = 40;
  const std::string k = key();
  Client shared_client = open();
  std::atomic<int> counter{0};
  std::atomic<int> inside{0};
  std::atomic<int> most_inside{0};
  std::mutex token_mutex;
  std::uint64_t last_token = 0;
  int token_regressions = 0;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        // Half the threads share one client (each thread is its own owner), half have their own.
        Client client = t % 2 == 0 ? shared_client : open();
        Mutex mutex = client.mutex(k);
        for (int i = 0; i < kIterations; ++i) {
          std::lock_guard guard(mutex);
          const int now_inside = ++inside;
          int seen = most_inside.load();
          while (now_inside > seen && !most_inside.compare_exchange_weak(seen, now_inside)) {
          }
          {
            std::lock_guard lock(token_mutex);
            const std::uint64_t token = mutex.lease()->token();
            if (token <= last_token) ++token_regressions;
            last_token = token;
          }
          const int value = counter.load(std::memory_order_relaxed);
          std::this_thread::sleep_for(200us);
          counter.store(value + 1, std::memory_order_relaxed);
          --inside;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter.load(), kThreads * kIterations) << "updates were lost: two holders at once";
  EXPECT_EQ(most_inside.load(), 1) << "threads were inside the critical section together";
  EXPECT_EQ(token_regressions, 0) << "a later acquisition got a fencing token not above the one before";
  EXPECT_TRUE(shared_client.inspect(k).empty()) << "the key is still held after every thread unlocked";
}

// Threads of one client, each its own owner, each acquisition a try and then a wait, with no
// pause inside: the client's own bookkeeping (which connection, which session, holds what) is
// what is tested, at the rate it changes hands.
TEST_P(Conformance, MutualExclusionThreadsOfOneClient) {
  constexpr int kThreads = 4;
  constexpr int kIterations = 100;
  const std::string k = key();
  Client client = open();
  std::atomic<int> inside{0}, overlaps{0}, token_regressions{0};
  std::uint64_t last_token = 0;
  long long count = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        Mutex mutex = client.mutex(k);
        for (int i = 0; i < kIterations; ++i) {
          std::unique_lock guard(mutex, std::try_to_lock);
          if (!guard.owns_lock()) guard.lock();
          if (inside.fetch_add(1) != 0) ++overlaps;
          const std::uint64_t token = mutex.lease()->token();
          if (token <= last_token) ++token_regressions;
          last_token = token;
          const long long seen = count;
          std::this_thread::yield();
          count = seen + 1;
          inside.fetch_sub(1);
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(overlaps.load(), 0) << "threads were inside the critical section together";
  EXPECT_EQ(token_regressions.load(), 0) << "a later acquisition got a fencing token not above the one before";
  EXPECT_EQ(count, kThreads * kIterations) << "updates were lost: two holders at once";
}

TEST_P(Conformance, MutualExclusionProcesses) {
  DLOCK_SKIP_UNLESS_MULTI_PROCESS();
  constexpr int kWorkers = 4;
  constexpr int kIterations = 40;
  const std::string counter_file = (temp_dir() / "counter").string();
  write_file_atomically(counter_file, "0 0\n");
  std::vector<ChildProcess> workers;
  workers.reserve(kWorkers);
  for (int i = 0; i < kWorkers; ++i) {
    workers.emplace_back(std::vector<std::string>{DLOCK_CONFORMANCE_WORKER, "counter", url(), key(),
                                                  std::to_string(kIterations), counter_file});
  }
  for (auto& worker : workers) {
    const auto status = worker.wait_for(90s);
    ASSERT_TRUE(status) << "worker " << worker.pid() << " did not finish in 90 s";
    EXPECT_EQ(*status, 0)
        << "worker " << worker.pid()
        << " failed (3: fencing token went backwards, 4: I/O, 5: dlock error; see its stderr)";
  }
  const auto text = read_file(counter_file);
  ASSERT_TRUE(text);
  std::istringstream in(*text);
  long long count = -1;
  in >> count;
  EXPECT_EQ(count, kWorkers * kIterations) << "updates were lost: two processes held the lock at once";
  EXPECT_TRUE(open().inspect(key()).empty()) << "the key is still held after every worker exited";
}

// ---- Reentrancy and owners ----

TEST_P(Conformance, Reentrancy) {
  Client client = open();
  Client other = open();
  const std::string k = key();
  Mutex mutex = client.mutex(k);

  mutex.lock();
  ASSERT_NE(mutex.lease(), nullptr);
  const std::uint64_t token = mutex.lease()->token();
  EXPECT_EQ(mutex.lease()->hold_count(), 1u);

  mutex.lock();  // same thread: re-entry, not a deadlock
  ASSERT_NE(mutex.lease(), nullptr);
  EXPECT_EQ(mutex.lease()->token(), token) << "a re-entry must keep the fencing token";
  EXPECT_EQ(mutex.lease()->hold_count(), 2u);
  auto info = sole_holder(other.inspect(k));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->hold_count, 2u);
  EXPECT_EQ(info->token, token);

  mutex.unlock();  // one hold left: still ours
  EXPECT_FALSE(other.try_acquire(k)) << "one unlock of two holds freed the key";
  info = sole_holder(other.inspect(k));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->hold_count, 1u);
  ASSERT_NE(mutex.lease(), nullptr);
  EXPECT_EQ(mutex.lease()->token(), token);

  mutex.unlock();  // the last hold
  EXPECT_EQ(mutex.lease(), nullptr);
  EXPECT_TRUE(other.inspect(k).empty());
  auto taken = other.try_acquire(k);
  ASSERT_TRUE(taken) << "the key is not free after the last unlock";
  EXPECT_GT(taken.lease().token(), token);
}

// Re-entry extends the lease to the TTL from now, in the backend (not only on this side).
TEST_P(Conformance, ReentryExtendsTheLease) {
  Client client = open();
  const std::string k = key();
  const LockOptions options{.ttl = 2s};
  Lease first = client.acquire(k, options);
  const auto first_until = first.valid_until();
  std::this_thread::sleep_for(600ms);
  Lease second = client.acquire(k, options);
  EXPECT_EQ(second.token(), first.token());
  EXPECT_EQ(second.hold_count(), 2u);
  // Without the extension about 1.4 s would be left.
  const auto info = sole_holder(client.inspect(k));
  ASSERT_TRUE(info);
  EXPECT_GT(info->ttl_left.count(), 1500) << "the re-entry did not extend the backend's lease";
  EXPECT_LE(info->ttl_left.count(), 2000);
  EXPECT_GE(ms(second.valid_until() - first_until), 600);
  EXPECT_EQ(first.valid_until(), second.valid_until()) << "holds of one acquisition share its expiry";
  second.release();
  EXPECT_TRUE(first.held());
  EXPECT_FALSE(client.inspect(k).empty());
  first.release();
  EXPECT_TRUE(client.inspect(k).empty());
}

// A re-entry with a shorter TTL never shortens the lease the outer hold relies on.
TEST_P(Conformance, ReentryNeverShortensTheLease) {
  Client client = open();
  const std::string k = key();
  Lease outer = client.acquire(k, {.ttl = 10s});
  const auto outer_until = outer.valid_until();
  Lease inner = client.acquire(k, {.ttl = 1s});
  EXPECT_EQ(inner.token(), outer.token());
  const auto info = sole_holder(client.inspect(k));
  ASSERT_TRUE(info);
  // Where the lease is the session, ttl_left is the session's, which no TTL changes.
  if (!capabilities().lease_is_the_session) {
    EXPECT_GT(info->ttl_left, 8s) << "the re-entry shortened the backend's lease";
  }
  EXPECT_GE(inner.valid_until(), outer_until) << "the re-entry shortened valid_until";
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(outer.lost());
  EXPECT_FALSE(open().try_acquire(k)) << "taken after the inner hold's TTL, inside the outer one's";
  inner.release();
  outer.release();
}

TEST_P(Conformance, DifferentThreadsAreDifferentOwners) {
  Client client = open();
  const std::string k = key();
  Mutex mutex = client.mutex(k);
  mutex.lock();
  const std::string main_owner = client.default_owner();
  EXPECT_EQ(mutex.lease()->owner(), main_owner);
  std::thread([&] {
    EXPECT_NE(client.default_owner(), main_owner);
    EXPECT_FALSE(mutex.try_lock()) << "another thread of the same client re-entered the lock";
    const auto holder = sole_holder(mutex.last_holders());
    ASSERT_TRUE(holder);
    EXPECT_EQ(holder->owner, main_owner);
    EXPECT_EQ(mutex.lease(), nullptr);
  }).join();
  mutex.unlock();
  std::thread([&] {
    EXPECT_TRUE(mutex.try_lock()) << "another thread cannot take the key after the unlock";
    mutex.unlock();
  }).join();
  EXPECT_TRUE(client.inspect(k).empty());
}

TEST_P(Conformance, ExplicitOwnerSharedAcrossClients) {
  Client first = open();
  Client second = open();
  Client stranger = open();
  const std::string k = key();
  const std::string owner = "job-" + run_id();
  Lease a = first.acquire(k, {.ttl = 10s, .owner = owner});
  auto b = second.try_acquire(k, {.ttl = 10s, .owner = owner});
  ASSERT_TRUE(b) << "the same explicit owner on another client is the same owner";
  EXPECT_EQ(b.lease().token(), a.token());
  EXPECT_EQ(b.lease().hold_count(), 2u);
  EXPECT_FALSE(stranger.try_acquire(k)) << "a default owner took a key held by an explicit owner";
  EXPECT_FALSE(stranger.try_acquire(k, {.owner = owner + "-other"}));

  // Released by a third party that knows owner and token (a script releasing what another
  // process acquired): one hold at a time.
  const std::uint64_t token = a.token();
  a.detach();
  EXPECT_EQ(stranger.release(k, owner, token), 1u);
  EXPECT_FALSE(stranger.inspect(k).empty());
  b.lease().release();
  EXPECT_TRUE(stranger.inspect(k).empty());
  EXPECT_TRUE(stranger.try_acquire(k));
}

// ---- Leases ----

// A holder that dies stops renewing; the key frees itself after the TTL, not before (or at
// once, where a lock ends with its holder's connection).
TEST_P(Conformance, ExpiryAfterSigkill) {
  DLOCK_SKIP_UNLESS_MULTI_PROCESS();
  constexpr auto kTtl = 700ms;
  const std::string k = key();
  const std::string ready = (temp_dir() / "ready").string();
  Client client = open();
  auto [holder, holder_token, holder_owner] = start_holder(url(), k, kTtl.count(), ready);
  ASSERT_NE(holder_token, 0u) << "the holder never reported its lease";

  const auto info = sole_holder(client.inspect(k));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->token, holder_token);
  EXPECT_EQ(info->owner, holder_owner);

  holder.kill(SIGKILL);
  ASSERT_EQ(holder.wait_for(10s), 128 + SIGKILL);
  const auto killed = Clock::now();

  if (capabilities().frees_when_holder_dies) {
    // The lock ended with the holder's connection, which the kernel closed.
    auto attempt = client.try_acquire_for(k, 5s, {.ttl = 10s});
    ASSERT_TRUE(attempt) << "the key was not freed when its holder died";
    EXPECT_LT(ms(Clock::now() - killed), 3000) << "ms from the kill to the new acquisition";
    EXPECT_GT(attempt.lease().token(), holder_token);
    return;
  }

  const auto first_sent = Clock::now();
  auto first = client.try_acquire(k, {.ttl = 10s});
  ASSERT_FALSE(first) << "the key was free right after its holder died: the lease did not last its TTL";
  const auto seen = sole_holder(first.holders());
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->token, holder_token);
  const auto left = seen->ttl_left;
  EXPECT_GT(left.count(), 0);
  // Where the lease is the session, the key is held until the store expires the dead holder's
  // session, which it may do up to the reported session timeout after it last heard from it.
  const auto lease = capabilities().lease_is_the_session ? left : std::chrono::milliseconds(kTtl);
  EXPECT_LE(left.count(), lease.count()) << "the holder report says more time is left than the TTL";

  auto attempt = client.try_acquire_for(k, lease + 10s, {.ttl = 10s});
  const auto acquired = Clock::now();
  ASSERT_TRUE(attempt) << "the dead holder's lease never expired";
  // The backend reported `left` when answering the first attempt, after first_sent (a session
  // is timed from the holder's last contact, before the kill).
  if (!capabilities().lease_is_the_session) {
    EXPECT_GE(ms(acquired - first_sent), left.count() - 25) << "taken before the reported time left had passed";
  }
  EXPECT_LT(ms(acquired - killed), ms(lease + 3s)) << "ms from the kill to the new acquisition";
  EXPECT_GT(attempt.lease().token(), holder_token);
}

// The evicted holder in another process learns of a force-release (its loss callback fires).
TEST_P(Conformance, ForceReleaseSeenByHolderInAnotherProcess) {
  DLOCK_SKIP_UNLESS_MULTI_PROCESS();
  const std::string k = key();
  const std::string ready = (temp_dir() / "ready").string();
  Client admin = open();
  auto [holder, holder_token, holder_owner] = start_holder(url(), k, 600, ready);
  ASSERT_NE(holder_token, 0u) << "the holder never reported its lease";

  const auto released = sole_holder(admin.force_release(k, Eviction::immediate));
  ASSERT_TRUE(released) << "force_release found nothing held";
  EXPECT_EQ(released->token, holder_token);
  EXPECT_EQ(released->owner, holder_owner);
  EXPECT_EQ(released->key, k);
  EXPECT_TRUE(admin.inspect(k).empty());

  const auto status = holder.wait_for(10s);
  ASSERT_TRUE(status) << "the evicted holder never noticed the force-release";
  EXPECT_EQ(*status, 42) << "the holder ended without reporting the loss";
  auto next = admin.try_acquire(k);
  ASSERT_TRUE(next);
  EXPECT_GT(next.lease().token(), holder_token);
}

// The default force-release (lock delay) keeps the key closed while the evicted holder in
// another process may still run: it dies without releasing, so the key opens when its lease
// would have run out, not before.
TEST_P(Conformance, ForceReleaseLockDelayOutlastsADeadHolder) {
  DLOCK_SKIP_UNLESS_MULTI_PROCESS();
  const std::string k = key();
  const std::string ready = (temp_dir() / "ready").string();
  Client admin = open();
  auto [holder, holder_token, holder_owner] = start_holder(url(), k, 1500, ready);
  ASSERT_NE(holder_token, 0u) << "the holder never reported its lease";

  const auto released = sole_holder(admin.force_release(k));
  ASSERT_TRUE(released);
  EXPECT_EQ(released->token, holder_token);
  const auto evicted = sole_holder(admin.inspect(k));
  ASSERT_TRUE(evicted) << "a delayed force-release must keep the evicted holder on record";
  EXPECT_TRUE(evicted->evicted);
  EXPECT_EQ(evicted->owner, holder_owner);
  EXPECT_EQ(evicted->token, holder_token);
  EXPECT_EQ(evicted->hold_count, 0u);
  const auto status = holder.wait_for(10s);
  ASSERT_TRUE(status) << "the evicted holder never noticed the force-release";
  EXPECT_EQ(*status, 42) << "the holder ended without reporting the loss";
  const auto died = Clock::now();
  const auto still = sole_holder(admin.inspect(k));
  Attempt early = admin.try_acquire(k);
  if (still && still->ttl_left > 100ms) {
    EXPECT_FALSE(early) << "taken " << still->ttl_left.count() << " ms before the evicted lease ran out";
    const auto seen = sole_holder(early.holders());
    ASSERT_TRUE(seen);
    EXPECT_TRUE(seen->evicted);
  }
  if (!early) {
    auto next = admin.try_acquire_for(k, 10s);
    ASSERT_TRUE(next) << "the key never opened after the evicted holder's lease";
    if (still) {
      // Where the lease is the holder's session, ttl_left is the session's timeout, which the
      // store counts from the holder's last contact: before `died`, by as long as the holder
      // took to report its loss, exit and be reaped (tens of ms on a loaded machine).
      const long long slack = capabilities().lease_is_the_session ? 250 : 50;
      EXPECT_GE(ms(Clock::now() - died), still->ttl_left.count() - slack) << "opened before the lease's end";
    }
    EXPECT_GT(next.lease().token(), holder_token);
  } else {
    EXPECT_GT(early.lease().token(), holder_token);
  }
}

TEST_P(Conformance, RenewalKeepsLockPastTtl) {
  Client client = open();
  Client other = open();
  const std::string k = key();
  std::atomic<int> losses{0};
  Lease lease = client.acquire(k, {.ttl = 600ms, .auto_renew = true});
  lease.on_lost([&](const LossInfo&) { ++losses; });
  const auto first_until = lease.valid_until();
  const auto start = Clock::now();
  int attempts = 0;
  while (Clock::now() - start < 2400ms) {
    EXPECT_FALSE(other.try_acquire(k))
        << "taken " << ms(Clock::now() - start) << " ms into a renewed 600 ms lease";
    ++attempts;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_GE(attempts, 5);
  EXPECT_TRUE(lease.held());
  EXPECT_FALSE(lease.lost());
  EXPECT_FALSE(lease.stop_token().stop_requested());
  EXPECT_EQ(losses.load(), 0);
  EXPECT_GT(ms(lease.valid_until() - first_until), 1200) << "valid_until did not move with the renewals";
  const auto info = sole_holder(other.inspect(k));
  ASSERT_TRUE(info);
  if (!capabilities().lease_is_the_session) {
    EXPECT_LE(info->ttl_left.count(), 600);
  }
  EXPECT_EQ(info->token, lease.token()) << "a renewal must not change the fencing token";
  EXPECT_NO_THROW(lease.release());
  EXPECT_TRUE(other.try_acquire(k));
}

TEST_P(Conformance, LossDetectedAfterForceRelease) {
  Client client = open();
  Client admin = open();
  const std::string k = key();
  std::promise<LossInfo> lost;
  std::atomic<int> callbacks{0};
  std::atomic<bool> stop_seen{false};
  Lease lease = client.acquire(k, {.ttl = 3s, .auto_renew = true});
  lease.on_lost([&](const LossInfo& info) {
    if (callbacks++ == 0) lost.set_value(info);
  });
  std::stop_callback on_stop(lease.stop_token(), [&] { stop_seen = true; });

  const auto released = sole_holder(admin.force_release(k));
  ASSERT_TRUE(released);
  // Closed to others, and to the evicted owner too, until it acknowledges its loss.
  Attempt meanwhile = admin.try_acquire(k);
  EXPECT_FALSE(meanwhile) << "a delayed force-release let a new holder in at once";
  if (const auto seen = sole_holder(meanwhile.holders())) {
    EXPECT_TRUE(seen->evicted);
    EXPECT_EQ(seen->token, lease.token());
  }
  EXPECT_EQ(released->token, lease.token());
  EXPECT_EQ(released->owner, lease.owner());

  auto future = lost.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready) << "the evicted holder was never told";
  const LossInfo info = future.get();
  EXPECT_EQ(info.reason, LossReason::not_owner) << to_string(info.reason);
  EXPECT_EQ(info.key, k);
  EXPECT_EQ(info.token, lease.token());
  EXPECT_FALSE(info.message.empty());
  EXPECT_TRUE(lease.lost());
  EXPECT_FALSE(lease.held());
  EXPECT_TRUE(lease.stop_token().stop_requested());
  EXPECT_TRUE(stop_seen.load());

  // A callback registered after the loss runs at once, on this thread.
  bool late = false;
  lease.on_lost([&](const LossInfo&) { late = true; });
  EXPECT_TRUE(late);

  try {
    lease.release();
    ADD_FAILURE() << "release() of a lost lease did not throw";
  } catch (const LockLostError& e) {
    EXPECT_EQ(e.key(), k);
    EXPECT_TRUE(message_names(e.what(), {k}, {}));
  }
  EXPECT_EQ(callbacks.load(), 1) << "the loss callback must run once";
  // The release acknowledged the loss: the key is open at once, well before the 3 s lease ends.
  auto next = admin.try_acquire(k);
  ASSERT_TRUE(next) << "the evicted holder's release did not open the key";
  EXPECT_GT(next.lease().token(), released->token);
}

TEST_P(Conformance, ForceReleaseImmediateFreesAtOnce) {
  Client client = open();
  Client admin = open();
  const std::string k = key();
  Lease lease = client.acquire(k, {.ttl = 10s, .auto_renew = true});
  const auto released = sole_holder(admin.force_release(k, Eviction::immediate));
  ASSERT_TRUE(released);
  EXPECT_FALSE(released->evicted);
  EXPECT_TRUE(admin.inspect(k).empty());
  auto next = admin.try_acquire(k);
  ASSERT_TRUE(next) << "an immediate force-release left the key closed";
  EXPECT_GT(next.lease().token(), lease.token());
  EXPECT_THROW(lease.renew(), LockLostError);
  EXPECT_THROW(lease.release(), LockLostError);
  EXPECT_FALSE(admin.inspect(k).empty()) << "the evicted holder's release touched the new acquisition";
}

// A force-release given a token evicts the holder with that token and no other: a wrong token
// evicts nothing, and the holder keeps the key and keeps renewing.
TEST_P(Conformance, ForceReleaseByToken) {
  Client client = open();
  Client admin = open();
  const std::string k = key();
  std::atomic<int> losses{0};
  Lease lease = client.acquire(k, {.ttl = 600ms, .auto_renew = true});
  lease.on_lost([&](const LossInfo&) { ++losses; });
  EXPECT_TRUE(admin.force_release(k, Eviction::immediate, lease.token() + 1).empty())
      << "a wrong token evicted";
  EXPECT_TRUE(admin.force_release(k, Eviction::delayed, lease.token() - 1).empty())
      << "a wrong token evicted";
  const auto before = lease.valid_until();
  std::this_thread::sleep_for(1500ms);  // past the 600 ms TTL: only renewals keep it
  EXPECT_TRUE(lease.held());
  EXPECT_EQ(losses.load(), 0);
  EXPECT_GT(ms(lease.valid_until() - before), 900)
      << "renewals stopped after a force-release with a wrong token";
  const auto kept = sole_holder(admin.inspect(k));
  ASSERT_TRUE(kept) << "a force-release with a wrong token freed the key";
  EXPECT_EQ(kept->token, lease.token());
  EXPECT_FALSE(kept->evicted);
  EXPECT_FALSE(admin.try_acquire(k));

  const auto evicted = admin.force_release(k, Eviction::delayed, lease.token());
  ASSERT_EQ(evicted.size(), 1u) << "the holder's token did not evict it";
  EXPECT_EQ(evicted[0].token, lease.token());
  EXPECT_EQ(evicted[0].owner, lease.owner());
  const auto closed = sole_holder(admin.inspect(k));
  ASSERT_TRUE(closed);
  EXPECT_TRUE(closed->evicted);
  EXPECT_TRUE(admin.force_release(k, Eviction::immediate, lease.token() + 1).empty())
      << "a wrong token evicted";
  // An evicted holder still counts as held: its token frees the key at once.
  ASSERT_EQ(admin.force_release(k, Eviction::immediate, lease.token()).size(), 1u);
  EXPECT_TRUE(admin.inspect(k).empty());
  EXPECT_THROW(lease.renew(), LockLostError);
}

// A key has no holder or one exclusive holder: inspect names exactly that one, as does the
// store's answer to a conflicting attempt (Busy::holders).
TEST_P(Conformance, InspectNamesTheOneExclusiveHolder) {
  Client client = open();
  const std::string k = key();
  EXPECT_TRUE(client.inspect(k).empty());
  Lease lease = client.acquire(k, {.ttl = 10s});
  const auto holders = client.inspect(k);
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_EQ(holders[0].mode, LockMode::exclusive);
  EXPECT_EQ(holders[0].owner, lease.owner());
  EXPECT_EQ(holders[0].token, lease.token());
  const auto answer = open_backend()->acquire({k, "someone-else", 10s});
  ASSERT_TRUE(std::holds_alternative<backend::Busy>(answer)) << "a held key was granted to another owner";
  const auto& busy = std::get<backend::Busy>(answer);
  ASSERT_EQ(busy.holders.size(), 1u) << "Busy did not name the one holder";
  EXPECT_EQ(busy.holders[0].token, lease.token());
  EXPECT_EQ(busy.holders[0].mode, LockMode::exclusive);
  lease.release();
  EXPECT_TRUE(client.inspect(k).empty());
}

// The evicted holder cannot re-enter, renew or shorten its way back; its release opens the key
// and wakes a waiter.
TEST_P(Conformance, ForceReleaseDelayEndsWithTheHoldersRelease) {
  Client client = open();
  Client admin = open();
  Client waiter = open();
  const std::string k = key();
  Lease lease = client.acquire(k, {.ttl = 20s});
  ASSERT_FALSE(admin.force_release(k).empty());
  const auto evicted = sole_holder(admin.inspect(k));
  ASSERT_TRUE(evicted);
  EXPECT_TRUE(evicted->evicted);
  EXPECT_EQ(evicted->hold_count, 0u);
  if (!capabilities().lease_is_the_session) {
    EXPECT_GT(evicted->ttl_left, 15s) << "the lock delay must keep the holder's lease as it was";
  }
  EXPECT_FALSE(client.try_acquire(k)) << "the evicted owner re-entered";
  EXPECT_FALSE(client.try_acquire(k, {.ttl = 20s})) << "the evicted owner re-entered";
  auto waited = std::async(std::launch::async, [&] { return waiter.try_acquire_for(k, 15s); });
  std::this_thread::sleep_for(200ms);
  EXPECT_THROW(lease.renew(), LockLostError);
  const auto acknowledged = Clock::now();
  EXPECT_THROW(lease.release(), LockLostError);
  Attempt next = waited.get();
  ASSERT_TRUE(next) << "the waiter never got the key after the evicted holder released it";
  EXPECT_LT(ms(Clock::now() - acknowledged), 5000) << "ms from the acknowledgement to the waiter's acquisition";
  EXPECT_GT(next.lease().token(), evicted->token);
}

// The capability and the watch agree: a store that says it notifies evictions accepts the watch
// (while it can be reached), one that says it does not declines it. The core subscribes by the
// answer; tools and the case below go by the capability.
TEST_P(Conformance, EvictionWatchAnswersAsTheCapabilitySays) {
  const auto backend = open_backend();
  struct Ignore final : backend::Events {
    void evicted(std::string_view) override {}
    void lost(const backend::LeaseRef&, std::string_view) override {}
    void all_lost(std::string_view) override {}
  };
  EXPECT_EQ(backend->watch(std::make_shared<Ignore>()), backend->capabilities().notifies_evictions);
}

// Where the store can notify, an evicted holder learns within about a second, long before its
// next renewal (TTL/3 = 10 s here).
TEST_P(Conformance, EvictedHolderLearnsWithinASecond) {
  if (!capabilities().notifies_evictions) GTEST_SKIP() << GetParam().name << " cannot notify an evicted holder";
  Client client = open();
  Client admin = open();
  const std::string k = key();
  std::promise<LossInfo> lost;
  Lease lease = client.acquire(k, {.ttl = 30s, .auto_renew = true});
  lease.on_lost([&](const LossInfo& info) { lost.set_value(info); });
  const auto forced = Clock::now();
  ASSERT_FALSE(admin.force_release(k).empty());
  auto future = lost.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready) << "the evicted holder was not told within 5 s";
  EXPECT_LT(ms(Clock::now() - forced), 1500) << "ms from the force-release to the holder's loss";
  EXPECT_EQ(future.get().reason, LossReason::not_owner);
  EXPECT_THROW(lease.release(), LockLostError);
  EXPECT_TRUE(admin.try_acquire(k));
}

TEST_P(Conformance, LossReportedThroughMutexAndUnlockStaysNoexcept) {
  static_assert(noexcept(std::declval<Mutex&>().unlock()));
  Client client = open();
  Client admin = open();
  const std::string k = key();
  std::promise<LossInfo> lost;
  std::atomic<int> callbacks{0};
  Mutex mutex = client.mutex(k, {.ttl = 600ms, .auto_renew = true});
  mutex.on_lost([&](const LossInfo& info) {
    if (callbacks++ == 0) lost.set_value(info);
  });
  mutex.lock();
  const std::uint64_t token = mutex.lease()->token();
  ASSERT_FALSE(admin.force_release(k).empty());
  auto future = lost.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready) << "the mutex's loss callback never ran";
  EXPECT_EQ(future.get().token, token);
  ASSERT_NE(mutex.lease(), nullptr);
  EXPECT_TRUE(mutex.lease()->lost());
  mutex.unlock();  // reported, never thrown
  EXPECT_EQ(mutex.lease(), nullptr);
  EXPECT_EQ(callbacks.load(), 1);
  EXPECT_TRUE(mutex.try_lock());
  mutex.unlock();
}

// A lease without renewal tells its holder to stop when valid_until() passes, which is before
// the backend's lease can run out.
TEST_P(Conformance, StopTokenFiresBeforeExpiry) {
  constexpr auto kTtl = 400ms;
  auto faulty = open_faulty();
  Client& client = faulty.client;
  const std::shared_ptr<FaultBackend>& faults = faulty.faults;
  Client other = open();
  const std::string k = key();
  std::promise<Clock::time_point> stopped;
  std::promise<LossInfo> lost;
  Lease lease = client.acquire(k, {.ttl = kTtl});
  const auto sent = faults->last_acquire_started();
  const auto valid_until = lease.valid_until();
  EXPECT_LT(valid_until - sent, kTtl)
      << "valid_until is " << ms(valid_until - sent) << " ms after the send: not earlier than send + TTL";
  EXPECT_GT(valid_until - sent, kTtl - kTtl / 10)
      << "valid_until is " << ms(valid_until - sent) << " ms after the send: a margin over 10% of the TTL";
  std::stop_callback on_stop(lease.stop_token(), [&] { stopped.set_value(Clock::now()); });
  lease.on_lost([&](const LossInfo& info) { lost.set_value(info); });

  auto stop_future = stopped.get_future();
  ASSERT_EQ(stop_future.wait_for(5s), std::future_status::ready) << "the stop token was never requested";
  const auto stop_at = stop_future.get();
  EXPECT_GE(ms(stop_at - valid_until), 0) << "ms from valid_until to the stop request";
  EXPECT_LT(ms(stop_at - valid_until), 2000) << "ms from valid_until to the stop request";
  auto loss_future = lost.get_future();
  ASSERT_EQ(loss_future.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(loss_future.get().reason, LossReason::expired);
  EXPECT_TRUE(lease.lost());
  EXPECT_FALSE(lease.held());
  EXPECT_THROW(lease.release(), LockLostError);
  EXPECT_TRUE(other.try_acquire_for(k, 3s)) << "the expired key never became free";
}

// ---- Fencing ----

TEST_P(Conformance, FencingMonotonic) {
  const std::string k = key();
  std::vector<std::pair<std::uint64_t, std::string>> tokens;
  const auto record = [&](std::uint64_t token, const std::string& after) {
    if (!tokens.empty()) {
      EXPECT_GT(token, tokens.back().first)
          << "the token after " << after << " is not above the one from " << tokens.back().second;
    }
    tokens.emplace_back(token, after);
  };
  {
    Client client = open();
    Client admin = open();
    {
      Lease lease = client.acquire(k);
      record(lease.token(), "the first acquisition");
      Lease again = client.acquire(k);
      EXPECT_EQ(again.token(), lease.token()) << "a re-entry must keep the token";
      const auto info = sole_holder(admin.inspect(k));
      ASSERT_TRUE(info);
      EXPECT_EQ(info->token, lease.token());
    }
    {
      Lease lease = client.acquire(k);
      record(lease.token(), "a release");
    }
    {
      Lease short_lease = client.acquire(k, {.ttl = 150ms});
      record(short_lease.token(), "a release (2)");
      if (capabilities().lease_is_the_session) {
        // No lease to run out: the lock ends when it is taken from its connection.
        ASSERT_FALSE(admin.force_release(k, Eviction::immediate).empty());
      }
      auto taken = admin.try_acquire_for(k, 5s);
      ASSERT_TRUE(taken) << "a 150 ms lease never expired";
      record(taken.lease().token(), "an expiry");
      const auto evicted = sole_holder(admin.force_release(k, Eviction::immediate));
      ASSERT_TRUE(evicted);
      EXPECT_EQ(evicted->token, taken.lease().token());
      Lease after_force = client.acquire(k);
      record(after_force.token(), "a force-release");
    }
    EXPECT_TRUE(admin.inspect(k).empty());
    admin.collect_idle();
    {
      Lease lease = client.acquire(k);
      record(lease.token(), "collect_idle");
    }
  }
  // Every client of this store is gone: a new one starts from the stored state.
  Client reopened = open();
  reopened.collect_idle();
  {
    Lease lease = reopened.acquire(k);
    record(lease.token(), "re-opening the store");
  }
  EXPECT_EQ(tokens.size(), 7u);
}

// A release (or renew) carrying an old acquisition's token never touches a newer acquisition
// by the same owner.
TEST_P(Conformance, StaleReleaseCannotTouchNewerAcquisition) {
  Client client = open();
  Client other = open();
  const std::string k = key();
  const std::string owner = "stale-" + run_id();
  Lease old_lease = client.acquire(k, {.ttl = 200ms, .owner = owner});
  const std::uint64_t old_token = old_lease.token();
  if (capabilities().lease_is_the_session) {
    ASSERT_FALSE(other.force_release(k, Eviction::immediate).empty());  // no lease to run out
  }
  ASSERT_TRUE(eventually([&] { return other.inspect(k).empty(); }, 5s)) << "the 200 ms lease never expired";

  Lease new_lease = client.acquire(k, {.ttl = 10s, .owner = owner});
  EXPECT_GT(new_lease.token(), old_token);
  EXPECT_EQ(new_lease.hold_count(), 1u) << "an acquisition after expiry is new, not a re-entry";

  EXPECT_THROW(client.release(k, owner, old_token), LockLostError);
  EXPECT_FALSE(open_backend()->renew({k, owner, old_token}, 10s)) << "a renew with a stale token succeeded";
  EXPECT_THROW(old_lease.release(), LockLostError);

  EXPECT_TRUE(new_lease.held());
  const auto info = sole_holder(other.inspect(k));
  ASSERT_TRUE(info) << "a stale release freed the newer acquisition";
  EXPECT_EQ(info->token, new_lease.token());
  EXPECT_EQ(info->hold_count, 1u);
  EXPECT_FALSE(other.try_acquire(k));
  EXPECT_NO_THROW(new_lease.release());
  EXPECT_TRUE(other.inspect(k).empty());
}

// ---- Waiting ----

TEST_P(Conformance, TryLockForDeadline) {
  constexpr auto kTimeout = 300ms;
  constexpr auto kSlack = 2s;
  Client holder = open();
  Client client = open();
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s});
  Mutex mutex = client.mutex(k);
  const auto check = [&](const char* how, const std::function<bool()>& call, Clock::duration lower) {
    const auto start = Clock::now();
    const bool acquired = call();
    const auto elapsed = Clock::now() - start;
    EXPECT_FALSE(acquired) << how;
    EXPECT_GE(elapsed, lower) << how << " returned early, after " << ms(elapsed) << " ms";
    EXPECT_LT(ms(elapsed), ms(kTimeout + kSlack)) << how << " overran (ms)";
  };
  check(
      "Mutex::try_lock_for", [&] { return mutex.try_lock_for(kTimeout); }, kTimeout);
  check(
      "Mutex::try_lock_until(steady)", [&] { return mutex.try_lock_until(Clock::now() + kTimeout); },
      kTimeout);
  // Another clock's deadline is converted once; allow for the conversion.
  check(
      "Mutex::try_lock_until(system)",
      [&] { return mutex.try_lock_until(std::chrono::system_clock::now() + kTimeout); }, kTimeout - 5ms);
  std::optional<LockInfo> holder_report;
  check(
      "Client::try_acquire_for",
      [&] {
        auto attempt = client.try_acquire_for(k, kTimeout);
        holder_report = sole_holder(attempt.holders());
        return bool(attempt);
      },
      kTimeout);
  ASSERT_TRUE(holder_report);
  EXPECT_EQ(holder_report->token, lease.token());
  check(
      "Client::try_acquire_until", [&] { return bool(client.try_acquire_until(k, Clock::now() + kTimeout)); },
      kTimeout);
}

TEST_P(Conformance, TryLockIsOneAttempt) {
  Client holder = open();
  auto faulty = open_faulty();
  Client& client = faulty.client;
  const std::shared_ptr<FaultBackend>& faults = faulty.faults;
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s});
  Mutex mutex = client.mutex(k);

  faults->reset_counts();
  auto start = Clock::now();
  EXPECT_FALSE(mutex.try_lock());
  EXPECT_LT(ms(Clock::now() - start), 1000) << "try_lock waited (ms)";
  EXPECT_EQ(faults->acquire_calls(), 1u) << "try_lock made more than one round trip";
  EXPECT_EQ(faults->waits(), 0u);

  faults->reset_counts();
  start = Clock::now();
  auto attempt = client.try_acquire(k);
  EXPECT_LT(ms(Clock::now() - start), 1000) << "try_acquire waited (ms)";
  EXPECT_FALSE(attempt);
  EXPECT_FALSE(attempt.holders().empty());
  EXPECT_EQ(faults->acquire_calls(), 1u) << "try_acquire made more than one round trip";
  EXPECT_EQ(faults->waits(), 0u);
  EXPECT_THROW(attempt.lease(), std::logic_error);

  lease.release();
  faults->reset_counts();
  EXPECT_TRUE(mutex.try_lock());
  EXPECT_EQ(faults->acquire_calls(), 1u);
  mutex.unlock();
}

TEST_P(Conformance, TimeoutZeroOrNegativeMeansTryOnce) {
  Client holder = open();
  auto faulty = open_faulty();
  Client& client = faulty.client;
  const std::shared_ptr<FaultBackend>& faults = faulty.faults;
  const std::string k = key();
  Mutex mutex = client.mutex(k);
  const auto check_once = [&](const char* how, bool expected, const std::function<bool()>& call) {
    faults->reset_counts();
    const auto start = Clock::now();
    EXPECT_EQ(call(), expected) << how;
    EXPECT_LT(ms(Clock::now() - start), 1000) << how << " waited (ms)";
    EXPECT_EQ(faults->acquire_calls(), 1u) << how << " is not exactly one attempt";
    EXPECT_EQ(faults->waits(), 0u) << how << " went to sleep";
  };
  {
    Lease lease = holder.acquire(k, {.ttl = 30s});
    check_once("try_acquire_for(0)", false, [&] { return bool(client.try_acquire_for(k, 0ms)); });
    check_once("try_acquire_for(-1s)", false, [&] { return bool(client.try_acquire_for(k, -1s)); });
    check_once("try_acquire_until(past)", false,
               [&] { return bool(client.try_acquire_until(k, Clock::now() - 1h)); });
    check_once("try_lock_for(0)", false, [&] { return mutex.try_lock_for(0ms); });
    check_once("try_lock_for(-5s)", false, [&] { return mutex.try_lock_for(-5s); });
    check_once("try_lock_until(past)", false, [&] { return mutex.try_lock_until(Clock::now() - 1s); });
    const auto report = client.try_acquire_for(k, 0ms);
    const auto seen = sole_holder(report.holders());
    ASSERT_TRUE(seen) << "a zero-timeout attempt must still report the holder";
    EXPECT_EQ(seen->token, lease.token());
  }
  // On a free key, "try once" succeeds.
  check_once("try_lock_for(-1s) on a free key", true, [&] { return mutex.try_lock_for(-1s); });
  mutex.unlock();
  check_once("try_acquire_for(0) on a free key", true, [&] { return bool(client.try_acquire_for(k, 0ms)); });
}

TEST_P(Conformance, HolderReportOnConflict) {
  constexpr auto kTtl = 5s;
  Client holder = open();
  Client client = open();
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = kTtl});
  // Every report names the one holder, exclusive.
  const auto check = [&](const std::vector<LockInfo>& holders, const char* via, std::uint32_t holds) {
    ASSERT_EQ(holders.size(), 1u) << via << " did not name the one holder of the key";
    const LockInfo* report = &holders.front();
    EXPECT_EQ(report->mode, LockMode::exclusive) << via;
    EXPECT_EQ(report->key, k) << via;
    EXPECT_EQ(report->owner, lease.owner()) << via;
    EXPECT_EQ(report->token, lease.token()) << via;
    EXPECT_EQ(report->hold_count, holds) << via;
    EXPECT_GT(report->ttl_left.count(), 0) << via;
    EXPECT_LE(report->ttl_left.count(), ms(kTtl)) << via;
  };
  auto attempt = client.try_acquire(k);
  EXPECT_FALSE(attempt);
  check(attempt.holders(), "try_acquire", 1);
  check(client.try_acquire_for(k, 50ms).holders(), "try_acquire_for", 1);
  Mutex mutex = client.mutex(k);
  EXPECT_FALSE(mutex.try_lock());
  check(mutex.last_holders(), "Mutex::last_holders", 1);
  check(client.inspect(k), "inspect", 1);

  // ttl_left is the time left, not the TTL.
  std::this_thread::sleep_for(300ms);
  const auto later = client.try_acquire(k).holders();
  check(later, "try_acquire after 300 ms", 1);
  if (!later.empty()) {
    EXPECT_LE(later[0].ttl_left.count(), ms(kTtl - 250ms)) << "ttl_left did not go down";
  }

  Lease again = holder.acquire(k, {.ttl = kTtl});
  check(client.try_acquire(k).holders(), "try_acquire after a re-entry", 2);
}

// A waiter is woken by the release, long before the holder's 30 s TTL.
TEST_P(Conformance, WaiterWokenByRelease) {
  Client holder = open();
  Client client = open();
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s});
  std::atomic<Clock::rep> released_at{0};
  std::thread releaser([&] {
    std::this_thread::sleep_for(200ms);
    released_at = Clock::now().time_since_epoch().count();
    lease.release();
  });
  const auto start = Clock::now();
  auto attempt = client.try_acquire_for(k, 20s);
  const auto done = Clock::now();
  releaser.join();
  ASSERT_TRUE(attempt) << "the waiter was not woken by the release";
  const auto release_time = Clock::time_point(Clock::duration(released_at.load()));
  EXPECT_GE(ms(done - release_time), 0) << "acquired before the holder released";
  EXPECT_LT(ms(done - start), 5000) << "ms of waiting: it waited for the TTL rather than a wake-up";
  RecordProperty("wake_latency_ms", std::to_string(ms(done - release_time)));
}

// Several waiters queue up; each release lets the next one in (no wake-up is lost).
TEST_P(Conformance, WaitersEachWokenInTurn) {
  constexpr int kWaiters = 3;
  Client holder = open();
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s});
  std::atomic<int> acquired{0};
  std::vector<std::thread> waiters;
  waiters.reserve(kWaiters);
  const auto start = Clock::now();
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      try {
        Client client = open();
        auto attempt = client.try_acquire_for(k, 20s, {.ttl = 30s});
        if (!attempt) return;
        ++acquired;
        std::this_thread::sleep_for(50ms);
        attempt.lease().release();
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
  }
  std::this_thread::sleep_for(200ms);
  lease.release();
  for (auto& waiter : waiters) waiter.join();
  EXPECT_EQ(acquired.load(), kWaiters) << "a waiter was never woken";
  EXPECT_LT(ms(Clock::now() - start), 10000) << "ms: waiters waited for TTLs rather than wake-ups";
}

// Waiting sleeps on the store's wake-up; it does not poll the store.
TEST_P(Conformance, WaitingDoesNotPoll) {
  Client holder = open();
  auto faulty = open_faulty();
  Client& client = faulty.client;
  const std::shared_ptr<FaultBackend>& faults = faulty.faults;
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s});
  faults->reset_counts();
  EXPECT_FALSE(client.try_acquire_for(k, 1s));
  EXPECT_LE(faults->acquire_calls(), 10u)
      << "a 1 s wait made " << faults->acquire_calls() << " acquire calls";
  EXPECT_LE(faults->waiters(), 1u);
}

// ---- Admin ----

TEST_P(Conformance, ListAndInspect) {
  Client client = open();
  const std::string base = key("list");
  // '%' and '_' are wildcards to SQL LIKE: the prefix filter must take them literally.
  const std::string prefix = base + "/p_%/";
  const std::vector<std::string> listed = {prepared(prefix + "a"), prepared(prefix + "b"), prepared(prefix + "c"),
                                           prepared(prefix + "d")};
  const std::vector<std::string> decoys = {prepared(base + "/pX%/z"), prepared(base + "/p_%"),
                                           prepared(base + "/p_%0/x")};
  std::vector<Lease> leases;
  leases.reserve(listed.size() + decoys.size());
  for (const auto& k : listed) leases.push_back(client.acquire(k, {.ttl = 10s}));
  for (const auto& k : decoys) leases.push_back(client.acquire(k, {.ttl = 10s}));
  {
    Lease released = client.acquire(prepared(prefix + "e"));  // released: never listed
  }

  const auto page = client.list(prefix);
  std::vector<std::string> keys;
  for (const auto& lock : page.locks) keys.push_back(lock.key);
  EXPECT_EQ(keys, listed);
  EXPECT_TRUE(page.next_after.empty()) << "the only page must end the listing";
  for (std::size_t i = 0; i < page.locks.size() && i < listed.size(); ++i) {
    EXPECT_EQ(page.locks[i].owner, leases[i].owner());
    EXPECT_EQ(page.locks[i].token, leases[i].token());
    EXPECT_EQ(page.locks[i].hold_count, 1u);
    EXPECT_GT(page.locks[i].ttl_left.count(), 0);
    EXPECT_LE(page.locks[i].ttl_left.count(), 10000);
  }

  const auto first = client.list(prefix, "", 2);
  ASSERT_EQ(first.locks.size(), 2u);
  EXPECT_EQ(first.locks[0].key, listed[0]);
  EXPECT_EQ(first.locks[1].key, listed[1]);
  EXPECT_EQ(first.next_after, listed[1]);
  const auto second = client.list(prefix, first.next_after, 2);
  ASSERT_EQ(second.locks.size(), 2u);
  EXPECT_EQ(second.locks[0].key, listed[2]);
  EXPECT_EQ(second.locks[1].key, listed[3]);
  EXPECT_TRUE(second.next_after.empty()) << "the last page must end the listing";

  const auto third = client.list(prefix, "", 3);
  ASSERT_EQ(third.locks.size(), 3u);
  EXPECT_EQ(third.next_after, listed[2]);
  const auto rest = client.list(prefix, third.next_after, 3);
  ASSERT_EQ(rest.locks.size(), 1u);
  EXPECT_EQ(rest.locks[0].key, listed[3]);
  EXPECT_TRUE(rest.next_after.empty());

  // Everything under the base, decoys included, in byte order.
  std::vector<std::string> all = listed;
  all.insert(all.end(), decoys.begin(), decoys.end());
  std::sort(all.begin(), all.end());
  std::vector<std::string> all_listed;
  for (const auto& lock : client.list(base + "/").locks) all_listed.push_back(lock.key);
  EXPECT_EQ(all_listed, all);

  const auto info = sole_holder(client.inspect(listed[0]));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->key, listed[0]);
  EXPECT_EQ(info->owner, leases[0].owner());
  EXPECT_EQ(info->token, leases[0].token());
  EXPECT_TRUE(client.inspect(prefix + "e").empty()) << "a released key is reported held";
  EXPECT_TRUE(client.inspect(prefix + "never-locked").empty());
  EXPECT_TRUE(client.force_release(prefix + "never-locked").empty());
  EXPECT_THROW(client.list(prefix, "", 0), InvalidArgument);
}

// held_for runs from the acquisition by the backend's clock: re-entries and renewals keep it,
// a new acquisition restarts it. Inspect, list and the conflict report all give it.
TEST_P(Conformance, HeldForCountsFromTheAcquisition) {
  Client client = open();
  Client other = open();
  const std::string k = key();
  Lease lease = client.acquire(k, {.ttl = 10s});
  std::this_thread::sleep_for(300ms);
  Lease reentry = client.acquire(k, {.ttl = 10s});
  lease.renew();
  const auto info = sole_holder(other.inspect(k));
  ASSERT_TRUE(info);
  if (!capabilities().records_acquisition_time) {
    EXPECT_FALSE(info->held_for) << "this store records no acquisition time, yet held_for is set";
    return;
  }
  ASSERT_TRUE(info->held_for) << "inspect gives no held_for";
  EXPECT_GE(info->held_for->count(), 299) << "held_for did not count from the acquisition";
  EXPECT_LT(info->held_for->count(), 10'000);
  const auto page = other.list(k);
  ASSERT_EQ(page.locks.size(), 1u);
  ASSERT_TRUE(page.locks[0].held_for) << "list gives no held_for";
  EXPECT_GE(page.locks[0].held_for->count(), info->held_for->count());
  const auto conflict = other.try_acquire(k);
  ASSERT_FALSE(conflict);
  const auto seen = sole_holder(conflict.holders());
  ASSERT_TRUE(seen);
  ASSERT_TRUE(seen->held_for) << "the conflict report gives no held_for";
  EXPECT_GE(seen->held_for->count(), 299);

  reentry.release();
  lease.release();
  const auto start = Clock::now();
  Lease again = other.acquire(k, {.ttl = 10s});
  const auto fresh = sole_holder(other.inspect(k));
  const auto elapsed = ms(Clock::now() - start);
  ASSERT_TRUE(fresh);
  ASSERT_TRUE(fresh->held_for);
  EXPECT_LE(fresh->held_for->count(), elapsed + 1) << "a new acquisition did not restart held_for";
}

// Stores that queue waiters say how many wait, in inspect and list; the others say nothing.
TEST_P(Conformance, WaitersAreCountedWhereTheStoreKnowsThem) {
  Client holder = open();
  Client waiting = open();
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 10s});
  std::optional<Attempt> got;
  std::promise<std::string> waiter_owner;
  std::thread waiter([&] {
    waiter_owner.set_value(waiting.default_owner());
    got.emplace(waiting.try_acquire_for(k, 10s));
  });
  const std::string queued = waiter_owner.get_future().get();
  if (capabilities().counts_waiters) {
    EXPECT_TRUE(eventually([&] { return sole_holder(holder.inspect(k))->waiters == 1u; }, 5s))
        << "inspect does not count the waiter";
    const auto page = holder.list(k);
    ASSERT_EQ(page.locks.size(), 1u);
    EXPECT_EQ(page.locks[0].waiters, 1u) << "list does not count the waiter";
    if (capabilities().names_waiters) {
      EXPECT_EQ(sole_holder(holder.inspect(k))->queue, std::vector<std::string>{queued})
          << "inspect does not name the waiter";
      EXPECT_EQ(page.locks[0].queue, std::vector<std::string>{queued}) << "list does not name the waiter";
    } else {
      EXPECT_FALSE(page.locks[0].queue);
    }
  } else {
    std::this_thread::sleep_for(200ms);
    EXPECT_FALSE(sole_holder(holder.inspect(k))->waiters);
    EXPECT_FALSE(holder.list(k).locks.at(0).waiters);
  }
  lease.release();
  waiter.join();
  ASSERT_TRUE(got && *got) << "the waiter did not get the key";
  const auto after = sole_holder(holder.inspect(k));  // held by the waiter now, which left the queue
  ASSERT_TRUE(after);
  if (capabilities().counts_waiters) {
    EXPECT_EQ(after->waiters, 0u);
  }
}

// Each client counts what it does and adds it to the store's totals: within a few seconds
// while it stays open, and at once when it closes.
TEST_P(Conformance, ActivityIsCountedAndAddedToTheStore) {
  Client observer = open();  // keeps an in-process store alive across the clients below
  const std::optional<Activity> before = observer.store_activity();
  const std::string k = key();
  Activity expected;
  {
    Client a = open();
    Client b = open();
    Lease lease = a.acquire(k, {.ttl = 10s});
    Lease reentry = a.acquire(k, {.ttl = 10s});  // not a new acquisition
    EXPECT_FALSE(b.try_acquire(k));
    const auto waited_from = Clock::now();
    EXPECT_FALSE(b.try_acquire_for(k, 100ms));
    const auto waited_ms = ms(Clock::now() - waited_from);
    lease.renew();
    ASSERT_FALSE(a.force_release(k).empty());
    EXPECT_THROW(reentry.renew(), LockLostError);

    const Activity mine = a.activity();
    EXPECT_EQ(mine.acquisitions, 1u);
    EXPECT_EQ(mine.conflicts, 0u);
    EXPECT_EQ(mine.waits, 0u);
    EXPECT_EQ(mine.renewals, 1u);
    EXPECT_EQ(mine.losses, 1u);
    const Activity theirs = b.activity();
    EXPECT_EQ(theirs.acquisitions, 0u);
    EXPECT_EQ(theirs.conflicts, 2u);
    EXPECT_EQ(theirs.waits, 1u);
    EXPECT_GE(theirs.wait_us, 50'000u);
    EXPECT_LE(theirs.wait_us, static_cast<std::uint64_t>(waited_ms) * 1000 + 1000);
    expected = mine;
    expected += theirs;
    if (!before) return;

    // Added while both stay open.
    EXPECT_TRUE(eventually(
        [&] {
          const Activity now = *observer.store_activity() - *before;
          return now.acquisitions >= expected.acquisitions && now.conflicts >= expected.conflicts &&
                 now.waits >= expected.waits && now.wait_us >= expected.wait_us &&
                 now.renewals >= expected.renewals && now.losses >= expected.losses;
        },
        10s))
        << "the counts did not reach the store while the clients stayed open";

    Lease last = a.acquire(key("last"));
    last.release();
    ++expected.acquisitions;
  }
  // Added when the clients closed, with no wait.
  const Activity added = *observer.store_activity() - *before;
  EXPECT_GE(added.acquisitions, expected.acquisitions) << "closing did not add what it had counted";
  EXPECT_GE(added.conflicts, expected.conflicts);
  EXPECT_GE(added.waits, expected.waits);
  EXPECT_GE(added.wait_us, expected.wait_us);
  EXPECT_GE(added.renewals, expected.renewals);
  EXPECT_GE(added.losses, expected.losses);
}

// ---- The standard lock vocabulary ----

TEST_P(Conformance, StdUniqueLockAndScopedLock) {
  Client client = open();
  Client other = open();
  Mutex one = client.mutex(key("one"));
  Mutex two = client.mutex(key("two"));
  const auto held = [&](const Mutex& m) { return !other.inspect(m.key()).empty(); };
  {
    std::unique_lock lock(one);
    EXPECT_TRUE(lock.owns_lock());
    EXPECT_TRUE(held(one));
    lock.unlock();
    EXPECT_FALSE(held(one));
    EXPECT_TRUE(lock.try_lock());
    EXPECT_TRUE(held(one));
  }
  EXPECT_FALSE(held(one));
  {
    std::unique_lock lock(one, std::try_to_lock);
    EXPECT_TRUE(lock.owns_lock());
    std::unique_lock timed(two, 100ms);
    EXPECT_TRUE(timed.owns_lock());
  }
  {
    std::scoped_lock both(one, two);
    EXPECT_TRUE(held(one));
    EXPECT_TRUE(held(two));
  }
  EXPECT_FALSE(held(one));
  EXPECT_FALSE(held(two));
  {
    std::lock_guard guard(two);
    EXPECT_TRUE(held(two));
  }
  EXPECT_FALSE(held(two));
  {
    Lease blocker = other.acquire(two.key(), {.ttl = 10s});
    EXPECT_EQ(std::try_lock(one, two), 1) << "std::try_lock must report the second mutex as busy";
    EXPECT_FALSE(held(one)) << "std::try_lock must release the first mutex when the second fails";
    std::unique_lock timed(two, 100ms);
    EXPECT_FALSE(timed.owns_lock());
  }
}

// ---- Bad input ----

TEST_P(Conformance, BadInputKeys) {
  Client client = open();
  struct BadKey {
    std::string key;
    std::vector<std::string> names;  // the message names at least one
  };
  const std::vector<BadKey> bad = {
      {"", {"empty"}},
      {std::string(2000, 'k'), {"2000", "long"}},
      {std::string("nul\0inside", 10), {"0x00", "NUL"}},
      {"new\nline", {"0x0a", "newline"}},
      {std::string("bad\xff utf8"), {"UTF-8"}},
  };
  for (const auto& item : bad) {
    const std::string& k = item.key;
    const std::vector<std::string>& names = item.names;
    SCOPED_TRACE("key of " + std::to_string(k.size()) + " bytes");
    EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.acquire(k); }, {"key"}, names));
    EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.try_acquire(k); }, {"key"}, names));
    EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.try_acquire_for(k, 10ms); }, {"key"}, names));
    EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.mutex(k); }, {"key"}, names));
    EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.inspect(k); }, {"key"}, names));
    EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.force_release(k); }, {"key"}, names));
    EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.release(k, "owner", 1); }, {"key"}, names));
  }
}

// The longest key the backend accepts works and comes back byte for byte; one more byte is a
// clear error naming the limit. Non-ASCII text keys work too.
TEST_P(Conformance, KeyAtTheLimitAndUnicode) {
  Client client = open();
  const std::size_t limit = open_backend()->max_key_bytes();
  ASSERT_GE(limit, 64u) << "a backend must take keys of at least 64 bytes";
  std::string longest = key("long-");
  longest.resize(limit, 'x');
  prepared(longest);
  {
    Lease lease = client.acquire(longest, {.ttl = 10s});
    const auto info = sole_holder(client.inspect(longest));
    ASSERT_TRUE(info);
    EXPECT_EQ(info->key, longest);
    const auto page = client.list(longest);
    ASSERT_EQ(page.locks.size(), 1u);
    EXPECT_EQ(page.locks[0].key, longest);
  }
  EXPECT_TRUE(client.inspect(longest).empty());
  EXPECT_TRUE(
      throws_naming<InvalidArgument>([&] { client.acquire(longest + "x"); }, {std::to_string(limit)}));

  const std::string unicode = key("заказ/42 ✓ 注文");
  Lease lease = client.acquire(unicode, {.ttl = 10s});
  const auto info = sole_holder(client.inspect(unicode));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->key, unicode);
  EXPECT_FALSE(open().try_acquire(unicode));
}

TEST_P(Conformance, BadInputTtlAndOwner) {
  Client client = open();
  const std::string k = key();
  for (const auto ttl : {0ms, -1ms}) {
    SCOPED_TRACE("ttl " + std::to_string(ttl.count()) + " ms");
    EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.acquire(k, {.ttl = ttl}); }, {"TTL"}));
    EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.try_acquire(k, {.ttl = ttl}); }, {"TTL"}));
    EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.mutex(k, {.ttl = ttl}); }, {"TTL"}));
  }
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.acquire(k, {.owner = ""}); }, {"owner"}));
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.acquire(k, {.owner = std::string(200, 'o')}); },
                                             {"owner"}));
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.mutex(k, {.owner = ""}); }, {"owner"}));
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.release(k, "", 1); }, {"owner"}));
  Lease lease = client.acquire(k, {.ttl = 10s});
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { lease.renew(0ms); }, {"TTL"}));
  EXPECT_TRUE(lease.held()) << "a rejected renew must leave the lease alone";
  EXPECT_FALSE(open().try_acquire(k)) << "bad input must not have freed the key";
}

// Malformed URLs of this backend's scheme, and an unknown option on a good URL.
TEST_P(Conformance, BadInputMalformedUrl) {
  const std::string with_option =
      url() + (url().find('?') == std::string::npos ? "?" : "&") + "dlock_bogus=1";
  EXPECT_TRUE(throws_naming<ConfigurationError>([&] { Client::open(with_option); }, {"dlock_bogus"}))
      << with_option;
  for (const auto& bad : GetParam().malformed_urls) {
    EXPECT_TRUE(throws_naming<ConfigurationError>([&] { Client::open(bad.url); }, {}, bad.names)) << bad.url;
  }
}

// A store that cannot be reached or created: a clear error naming it, never a crash.
TEST_P(Conformance, BadInputBadLocation) {
  const auto& param = GetParam();
  if (param.bad_location_url.empty()) GTEST_SKIP() << param.name << " has no location that can be bad";
  try {
    Client client = Client::open(param.bad_location_url);
    client.try_acquire(key());
    ADD_FAILURE() << "opening and using " << param.bad_location_url << " did not fail";
  } catch (const Error& e) {
    EXPECT_TRUE(e.kind() == ErrorKind::configuration || e.kind() == ErrorKind::connection)
        << "error kind " << static_cast<int>(e.kind()) << ": " << e.what();
    EXPECT_TRUE(message_names(e.what(), {param.bad_location_names}, {}));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(all_backends()), BackendParamName());

// URLs no backend accepts.
TEST(ConformanceUrls, MalformedUrlsNameTheProblem) {
  const std::vector<MalformedUrl> bad = {
      {"nope://x", {"nope"}},           {"no-scheme-here", {"scheme"}},     {"://x", {"scheme"}},
      {"local://x?bogus=1", {"bogus"}}, {"local://x?dup=1&dup=2", {"dup"}},
  };
  for (const auto& item : bad) {
    EXPECT_TRUE(throws_naming<ConfigurationError>([&] { Client::open(item.url); }, {}, item.names))
        << item.url;
  }
}

}  // namespace
}  // namespace dlock::test
