// The conformance suite's shared-hold cases (dlock/shared_lock.hpp): read-write locks and
// semaphores on every store that keeps several holders per key, and a clear refusal on those
// that keep one. Exclusion is judged from outside the library: threads count who is inside,
// and processes append every hold to a shared log that the test replays.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <thread>
#include <variant>

#include "conformance/conformance_fixture.hpp"
#include "support/child_process.hpp"

using namespace std::chrono_literals;

namespace dlock::test {
namespace {

class SharedHolds : public BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    if (!capabilities().shared_holders && !refusal_test()) {
      GTEST_SKIP() << GetParam().name << " keeps one holder per key";
    }
  }

 private:
  static bool refusal_test() {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    return name.rfind("StoresOfOneHolderPerKey", 0) == 0;
  }
};

#define DLOCK_SKIP_UNLESS_MULTI_PROCESS()                                                    \
  do {                                                                                       \
    if (!spans_processes()) GTEST_SKIP() << GetParam().name << " locks live in one process"; \
  } while (0)

const LockOptions kShared{.mode = LockMode::shared};

std::size_t count_mode(const std::vector<LockInfo>& holders, LockMode mode) {
  return static_cast<std::size_t>(
      std::count_if(holders.begin(), holders.end(), [&](const LockInfo& h) { return h.mode == mode; }));
}

TEST_P(SharedHolds, StoresOfOneHolderPerKeyRefuseSharedHoldsClearly) {
  if (capabilities().shared_holders) GTEST_SKIP() << GetParam().name << " keeps several holders per key";
  Client client = open();
  EXPECT_TRUE(throws_naming<ConfigurationError>([&] { client.shared_mutex(key()); }, {"one holder", "read lock"}));
  EXPECT_TRUE(throws_naming<ConfigurationError>([&] { client.semaphore(key(), 2); }, {"one holder", "semaphore"}));
  EXPECT_TRUE(throws_naming<ConfigurationError>([&] { client.try_acquire(key(), kShared); }, {"one holder"}));
}

TEST_P(SharedHolds, ReadersShareAndWritersExcludeThem) {
  const std::string k = key();
  Client a = open(), b = open(), c = open();
  auto first = a.shared_mutex(k);
  auto second = b.shared_mutex(k);
  auto writer = c.shared_mutex(k);
  std::shared_lock reading(first);
  ASSERT_TRUE(second.try_lock_shared()) << "a second reader was refused while only a reader held the key";
  EXPECT_NE(first.shared_lease()->token(), second.shared_lease()->token()) << "each reader has its own token";

  EXPECT_FALSE(writer.try_lock_for(100ms)) << "a writer got the key while two readers held it";
  const auto seen = writer.last_holders();
  EXPECT_EQ(count_mode(seen, LockMode::shared), 2u) << "the refused writer should name both readers";
  const auto holders = a.inspect(k);
  ASSERT_EQ(holders.size(), 2u);
  EXPECT_EQ(count_mode(holders, LockMode::shared), 2u);
  for (const auto& h : holders) {
    EXPECT_EQ(h.key, k);
    EXPECT_EQ(h.hold_count, 1u);
    EXPECT_GT(h.ttl_left.count(), 0);
  }

  second.unlock_shared();
  reading.unlock();
  {
    std::unique_lock writing(writer, std::defer_lock);
    ASSERT_TRUE(writing.try_lock_for(5s)) << "the writer did not get the key once the readers left";
    EXPECT_FALSE(second.try_lock_shared()) << "a reader got the key while a writer held it";
    const auto last = second.last_shared_holders();
    ASSERT_EQ(last.size(), 1u);
    EXPECT_EQ(last[0].mode, LockMode::exclusive);
    EXPECT_EQ(last[0].token, writer.lease()->token());
  }
  EXPECT_TRUE(second.try_lock_shared());
  second.unlock_shared();
}

// Tokens are per key whatever the mode: each new acquisition's is above all earlier ones.
TEST_P(SharedHolds, TokensRiseAcrossReadersAndWriters) {
  const std::string k = key();
  Client a = open(), b = open();
  std::uint64_t before = 0;
  for (int round = 0; round < 3; ++round) {
    auto r1 = a.acquire(k, kShared);
    auto r2 = b.acquire(k, kShared);
    EXPECT_GT(r1.token(), before);
    EXPECT_GT(r2.token(), before);
    const auto readers = std::max(r1.token(), r2.token());
    r1.release();
    r2.release();
    auto w = a.acquire(k);
    EXPECT_GT(w.token(), readers) << "a writer's token must be above every earlier reader's";
    before = w.token();
  }
}

TEST_P(SharedHolds, AWriterMayAlsoReadAReaderCannotUpgrade) {
  const std::string k = key();
  Client client = open();
  auto lock = client.shared_mutex(k);
  lock.lock();
  ASSERT_TRUE(lock.try_lock_shared()) << "the writer could not also read";
  EXPECT_EQ(lock.shared_lease()->token(), lock.lease()->token()) << "a writer's read re-enters its hold";
  EXPECT_EQ(lock.shared_lease()->hold_count(), 2u);
  const auto holders = client.inspect(k);
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_EQ(holders[0].mode, LockMode::exclusive);
  lock.unlock_shared();
  lock.unlock();
  EXPECT_TRUE(client.inspect(k).empty());

  lock.lock_shared();
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { lock.try_lock(); }, {"upgrade", "release"}));
  EXPECT_EQ(client.inspect(k).size(), 1u) << "the refused upgrade must leave the read hold alone";
  lock.unlock_shared();
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

// Readers that come and go so that one always holds the key cannot keep a waiting writer out.
TEST_P(SharedHolds, AWaitingWriterIsNotStarvedByReaders) {
  const std::string k = key();
  Client readers_client = open(), writer_client = open();
  std::atomic<bool> stop{false};
  std::atomic<int> readers_inside{0}, reads{0}, conflicts{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      auto lock = readers_client.shared_mutex(k);
      std::this_thread::sleep_for(t * 10ms);  // staggered, so the holds overlap
      while (!stop.load()) {
        if (!lock.try_lock_shared_for(100ms)) continue;
        readers_inside.fetch_add(1);
        ++reads;
        std::this_thread::sleep_for(30ms);
        readers_inside.fetch_sub(1);
        lock.unlock_shared();
      }
    });
  }
  ASSERT_TRUE(eventually([&] { return reads.load() >= 6; }, 10s)) << "the readers never got going";
  auto writer = writer_client.shared_mutex(k);
  const auto asked = Clock::now();
  const bool got = writer.try_lock_for(20s);
  const auto waited = Clock::now() - asked;
  if (got) {
    for (int i = 0; i < 5; ++i) {
      if (readers_inside.load() != 0) ++conflicts;
      std::this_thread::sleep_for(10ms);
    }
    writer.unlock();
  }
  stop = true;
  for (auto& t : readers) t.join();
  ASSERT_TRUE(got) << "the writer waited 20 s behind a stream of readers";
  EXPECT_LT(ms(waited), 10'000) << "ms the writer waited behind readers whose holds last 30 ms";
  EXPECT_EQ(conflicts.load(), 0) << "readers were inside while the writer held the key";
}

// A writer's claim lasts until a writer's grant: the readers who waited behind a writer pass it
// (they enter together), and new readers are still refused once they have. A claim that a
// reader's grant ended would let a stream of new readers in ahead of the waiting writer.
TEST_P(SharedHolds, AWritersClaimOutlivesTheReadersItLetsPass) {
  if (capabilities().names_waiters) {
    GTEST_SKIP() << GetParam().name << " queues its waiters: a writer keeps its place in line without a claim";
  }
  if (GetParam().name == "redis") GTEST_SKIP() << "redis:// without fair=true keeps no writer's claim yet";
  auto backend = open_backend();
  const std::string k = key();
  const auto take = [&](std::string_view owner, LockMode mode, bool waiting, std::uint64_t behind = 0) {
    backend::AcquireRequest request{k, owner, 10s, mode, 0, waiting};
    request.waited_behind = behind;
    return backend->acquire(request);
  };
  const auto token = [](const backend::AcquireResult& result) {
    const auto* acquired = std::get_if<backend::Acquired>(&result);
    return acquired ? acquired->token : 0;
  };
  const std::uint64_t earlier_writer = token(take("w0", LockMode::exclusive, false));
  ASSERT_NE(earlier_writer, 0u);
  ASSERT_EQ(backend->release({k, "w0", earlier_writer}), 0u);
  const std::uint64_t reader = token(take("r1", LockMode::shared, false));
  ASSERT_NE(reader, 0u);
  ASSERT_TRUE(std::holds_alternative<backend::Busy>(take("w", LockMode::exclusive, true)))
      << "a writer got a key held shared";
  if (const std::uint64_t entered = token(take("r2", LockMode::shared, false))) {
    ADD_FAILURE() << "a new reader passed a waiting writer's claim";
    ASSERT_EQ(backend->release({k, "r2", entered}), 0u);
  }
  const std::uint64_t passed = token(take("r3", LockMode::shared, true, earlier_writer));
  ASSERT_NE(passed, 0u) << "a reader that waited behind a writer was refused by the next writer's claim";
  if (const std::uint64_t entered = token(take("r4", LockMode::shared, false))) {
    ADD_FAILURE() << "the writer's claim ended when a reader that waited behind a writer entered";
    ASSERT_EQ(backend->release({k, "r4", entered}), 0u);
  }
  ASSERT_EQ(backend->release({k, "r1", reader}), 0u);
  ASSERT_EQ(backend->release({k, "r3", passed}), 0u);
  const std::uint64_t writer = token(take("w", LockMode::exclusive, true));
  ASSERT_GT(writer, passed) << "the waiting writer did not get the key its readers left";
  ASSERT_EQ(backend->release({k, "w", writer}), 0u);
  EXPECT_GT(token(take("r5", LockMode::shared, false)), writer) << "the writer's grant did not end its claim";
}

// A writer's release lets every waiting reader in, not one of them.
TEST_P(SharedHolds, WaitingReadersAllEnterWhenTheWriterLeaves) {
  constexpr int kReaders = 3;
  const std::string k = key();
  Client writer_client = open(), readers_client = open();
  auto writer = writer_client.shared_mutex(k);
  writer.lock();
  std::atomic<int> inside{0}, most{0};
  std::atomic<bool> leave{false};
  std::vector<std::future<bool>> readers;
  for (int t = 0; t < kReaders; ++t) {
    readers.push_back(std::async(std::launch::async, [&] {
      auto lock = readers_client.shared_mutex(k);
      if (!lock.try_lock_shared_for(20s)) return false;
      const int now = inside.fetch_add(1) + 1;
      int seen = most.load();
      while (seen < now && !most.compare_exchange_weak(seen, now)) {
      }
      while (!leave.load() && most.load() < kReaders) std::this_thread::sleep_for(5ms);
      inside.fetch_sub(1);
      lock.unlock_shared();
      return true;
    }));
  }
  std::this_thread::sleep_for(300ms);  // the readers are waiting
  EXPECT_EQ(inside.load(), 0) << "a reader got in while the writer held the key";
  const auto released = Clock::now();
  writer.unlock();
  const bool all_in = eventually([&] { return most.load() == kReaders; }, 10s);
  const auto took = Clock::now() - released;
  leave = true;
  for (auto& r : readers) EXPECT_TRUE(r.get());
  ASSERT_TRUE(all_in) << "the waiting readers did not all hold the key together";
  EXPECT_LT(ms(took), 5'000) << "ms from the writer's release until every reader held the key";
}

struct LoggedHold {
  char sign;
  char role;
  std::uint64_t token;
  long pid;
};

std::vector<LoggedHold> read_log(const std::string& path) {
  std::vector<LoggedHold> log;
  std::ifstream in(path);
  LoggedHold h{};
  while (in >> h.sign >> h.role >> h.token >> h.pid) log.push_back(h);
  return log;
}

// Replays a log of holds: the most shared holders at once, overlaps involving a writer, and
// writers whose token is not above every token logged before them.
struct LogVerdict {
  int most_shared = 0;
  int writer_overlaps = 0;
  int writer_token_regressions = 0;
  int holds = 0;
  int unbalanced = 0;
};

LogVerdict judge(const std::vector<LoggedHold>& log) {
  LogVerdict v;
  int shared = 0, writers = 0;
  std::uint64_t highest = 0;
  for (const auto& h : log) {
    if (h.sign == '+') {
      ++v.holds;
      if (h.role == 'w') {
        if (shared > 0 || writers > 0) ++v.writer_overlaps;
        if (h.token <= highest) ++v.writer_token_regressions;
        ++writers;
      } else {
        if (writers > 0) ++v.writer_overlaps;
        ++shared;
        v.most_shared = std::max(v.most_shared, shared);
      }
      highest = std::max(highest, h.token);
    } else {
      int& count = h.role == 'w' ? writers : shared;
      if (--count < 0) ++v.unbalanced;
    }
  }
  if (shared != 0 || writers != 0) ++v.unbalanced;
  return v;
}

std::string make_log(const std::filesystem::path& dir) {
  const std::string path = (dir / "holds.log").string();
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  EXPECT_GE(fd, 0);
  ::close(fd);
  return path;
}

void run_workers(const std::string& url, const std::string& key, const std::vector<std::string>& roles,
                 int iterations, const std::string& log) {
  std::vector<ChildProcess> workers;
  for (const auto& role : roles) {
    workers.emplace_back(std::vector<std::string>{DLOCK_CONFORMANCE_WORKER, "share", url, key, role,
                                                  std::to_string(iterations), log});
  }
  for (auto& worker : workers) {
    const auto status = worker.wait_for(100s);
    ASSERT_TRUE(status) << "worker " << worker.pid() << " did not finish in 100 s";
    EXPECT_EQ(*status, 0) << "worker " << worker.pid() << " failed (4: I/O, 5: dlock error)";
  }
}

TEST_P(SharedHolds, ReadersAndWritersInProcessesNeverConflict) {
  DLOCK_SKIP_UNLESS_MULTI_PROCESS();
  constexpr int kIterations = 60;
  const std::string log = make_log(temp_dir());
  run_workers(url(), key(), {"reader", "reader", "writer", "writer"}, kIterations, log);
  const auto verdict = judge(read_log(log));
  EXPECT_EQ(verdict.holds, 4 * kIterations) << "the log misses holds";
  EXPECT_EQ(verdict.unbalanced, 0);
  EXPECT_EQ(verdict.writer_overlaps, 0) << "a writer held the key together with another holder";
  EXPECT_EQ(verdict.writer_token_regressions, 0) << "a writer's token was not above every earlier one";
}

// One line of a holds log, in one write (O_APPEND), as conformance_worker writes its own.
void append(const std::string& log, const std::string& line) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  ::close(fd);
}

// The writer's holds in a holds log whose tokens lie strictly between `above` and `below`.
long writes_between(const std::string& log, std::uint64_t above, std::uint64_t below) {
  const auto holds = read_log(log);
  return std::count_if(holds.begin(), holds.end(), [&](const LoggedHold& h) {
    return h.sign == '+' && h.role == 'w' && h.token > above && h.token < below;
  });
}

// The mirror of AWaitingWriterIsNotStarvedByReaders: a writer that takes the key back the
// moment it lets go (in a process of its own, so that waking the reader takes longer than the
// writer's next attempt) does not shut out a reader that waited for it. Judged by tokens, not
// by time: of the writer's holds, those granted after the one that first refused the reader's
// call and before the reader's own (a loaded machine may keep the reader from asking for tens
// of milliseconds while the writer cycles: those holds are not the store's to stop). A store
// that places the readers' claim in the refusing statement lets none pass; one that places it
// in a statement of its own may let the writer pass in that round trip.
TEST_P(SharedHolds, AWaitingReaderIsNotStarvedByAWriterThatRetakesAtOnce) {
  DLOCK_SKIP_UNLESS_MULTI_PROCESS();
  if (GetParam().name == "redis") {
    GTEST_SKIP() << "redis:// without fair=true keeps no readers' claim yet: its wake-up lets a writer that "
                    "takes the key back at once pass a waiting reader now and then (1 run in 30 under load)";
  }
  // A key of this run's own: the writer is killed holding it, and its lease outlives the test.
  const std::string k = key(std::to_string(Clock::now().time_since_epoch().count()));
  const std::string log = make_log(temp_dir());
  const auto writes = [&] {
    const auto holds = read_log(log);
    return std::count_if(holds.begin(), holds.end(), [](const LoggedHold& h) { return h.sign == '+'; });
  };
  ChildProcess writer({DLOCK_CONFORMANCE_WORKER, "share", url(), k, "writer", "1000000", log});
  ASSERT_TRUE(eventually([&] { return writes() >= 20; }, 20s)) << "the writer never got going";
  auto [reader_client, faults] = open_faulty();
  std::atomic<std::uint64_t> refused_by{0};  // the writer's token that first refused the reader's current call
  faults->after_attempts([&](const backend::AcquireResult& result) {
    const auto* busy = std::get_if<backend::Busy>(&result);
    if (!busy || refused_by.load() != 0) return;
    for (const LockInfo& holder : busy->holders) {
      if (holder.mode == LockMode::exclusive) refused_by = std::max(refused_by.load(), holder.token);
    }
  });
  auto reader = reader_client.shared_mutex(k);
  // The reader's calls until five were refused by the writer (a call may find the key free
  // between two of its holds); the first only warms up (it opens the reader's connections).
  int judged = 0;
  for (int call = 0; call < 30 && judged < 5; ++call) {
    refused_by = 0;
    ASSERT_TRUE(reader.try_lock_shared_for(10s)) << "a reader waited 10 s behind a writer whose holds last 1 ms";
    const std::uint64_t token = reader.shared_lease()->token();
    append(log, "+ r " + std::to_string(token) + " 0\n");
    std::this_thread::sleep_for(1ms);
    append(log, "- r " + std::to_string(token) + " 0\n");
    reader.unlock_shared();
    if (call > 0 && refused_by.load() != 0) {
      ++judged;
      EXPECT_LE(writes_between(log, refused_by.load(), token), 1)
          << "of the writer's holds went ahead of a reader it had refused (token " << refused_by.load()
          << "), before the reader's hold " << token;
    }
    std::this_thread::sleep_for(20ms);  // the writer takes the key back meanwhile
  }
  writer.kill(SIGKILL);
  EXPECT_GE(judged, 3) << "the writer refused too few of the reader's calls for the test to judge";
  EXPECT_EQ(judge(read_log(log)).writer_overlaps, 0) << "the writer held the key together with the reader";
}

TEST_P(SharedHolds, ASemaphoreOfTwoNeverHasThreeHoldersAcrossProcesses) {
  DLOCK_SKIP_UNLESS_MULTI_PROCESS();
  constexpr int kIterations = 60;
  const std::string log = make_log(temp_dir());
  run_workers(url(), key(), {"permit:2", "permit:2", "permit:2", "permit:2"}, kIterations, log);
  const auto verdict = judge(read_log(log));
  EXPECT_EQ(verdict.holds, 4 * kIterations) << "the log misses holds";
  EXPECT_EQ(verdict.unbalanced, 0);
  EXPECT_LE(verdict.most_shared, 2) << "a semaphore of 2 had more holders at once";
}

TEST_P(SharedHolds, ASemaphoreOfTwoInThreads) {
  constexpr int kThreads = 4;
  constexpr int kIterations = 15;
  const std::string k = key();
  Client client = open();
  std::atomic<int> inside{0}, most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto permits = client.semaphore(k, 2);
      for (int i = 0; i < kIterations; ++i) {
        std::unique_lock permit(permits);
        const int now = inside.fetch_add(1) + 1;
        int seen = most.load();
        while (seen < now && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(2ms);
        inside.fetch_sub(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(most.load(), 2) << "a semaphore of 2 had more holders at once";
  EXPECT_TRUE(client.inspect(k).empty());
}

TEST_P(SharedHolds, ASemaphoresPermitsAreFixedWhileItIsHeld) {
  const std::string k = key();
  Client a = open(), b = open();
  auto two = a.semaphore(k, 2);
  ASSERT_TRUE(two.try_acquire());
  auto three = b.semaphore(k, 3);
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { three.try_acquire(); }, {"2 permits", "3 permits"}));
  auto readers = b.shared_mutex(k);
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { readers.try_lock_shared(); }, {"2 permits", "no limit"}));
  auto again = b.semaphore(k, 2);
  ASSERT_TRUE(again.try_acquire());
  auto third = open().semaphore(k, 2);
  EXPECT_FALSE(third.try_acquire()) << "a semaphore of 2 let a third holder in";
  EXPECT_EQ(third.last_holders().size(), 2u);
  two.release();
  again.release();
  // Free again: the next holder sets the number.
  EXPECT_TRUE(three.try_acquire());
  three.release();
}

TEST_P(SharedHolds, AKilledHoldersPermitReturnsAfterItsTtl) {
  DLOCK_SKIP_UNLESS_MULTI_PROCESS();
  constexpr auto kTtl = 700ms;
  const std::string k = key();
  const std::string ready = (temp_dir() / "ready").string();
  ChildProcess holder({DLOCK_CONFORMANCE_WORKER, "hold", url(), k, std::to_string(kTtl.count()), ready, "1"});
  ASSERT_TRUE(eventually([&] { return read_file(ready).has_value(); }, 30s)) << "the holder never took its permit";
  Client client = open();
  auto permit = client.semaphore(k, 1);
  EXPECT_FALSE(permit.try_acquire()) << "a semaphore of 1 gave a second permit";
  holder.kill(SIGKILL);
  ASSERT_EQ(holder.wait_for(10s), 128 + SIGKILL);
  const auto killed = Clock::now();
  const auto patience = capabilities().lease_is_the_session ? 10s : kTtl + 5s;
  ASSERT_TRUE(permit.try_acquire_for(patience)) << "the dead holder's permit never came back";
  EXPECT_LT(ms(Clock::now() - killed), ms(patience));
  permit.release();
}

TEST_P(SharedHolds, ForceReleaseOfOneHolder) {
  const std::string k = key();
  Client a = open(), b = open();
  // Renewing every ~0.7 s: a store that cannot notify evictions tells the holder at its next renewal.
  const LockOptions renewing{.ttl = 2s, .auto_renew = true, .mode = LockMode::shared};
  auto first = a.acquire(k, renewing);
  auto second = b.acquire(k, renewing);
  const auto evicted = a.force_release(k, Eviction::immediate, first.token());
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].token, first.token());
  EXPECT_EQ(evicted[0].mode, LockMode::shared);
  const auto left = a.inspect(k);
  ASSERT_EQ(left.size(), 1u) << "force-release by token must leave the other reader alone";
  EXPECT_EQ(left[0].token, second.token());
  EXPECT_TRUE(eventually([&] { return first.lost(); }, 20s)) << "the evicted reader never learned";
  EXPECT_THROW(first.release(), LockLostError);
  EXPECT_FALSE(second.lost());
  second.release();
}

TEST_P(SharedHolds, SeveralKeysSharedAtOnce) {
  Client a = open(), b = open();
  auto first = a.acquire_all({key("x"), key("y")}, kShared);
  auto second = b.try_acquire_all({key("y"), key("x")}, kShared);
  ASSERT_TRUE(second) << "two readers of the same set should share it";
  EXPECT_FALSE(open().try_acquire_all({key("x"), key("y")})) << "a writer got a set held by readers";
}

TEST_P(SharedHolds, BadInputBeforeAnyRoundTrip) {
  Client client = open();
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.semaphore(key(), 0); }, {"at least 1 permit"}));
  EXPECT_TRUE(throws_naming<InvalidArgument>([&] { client.try_acquire(key(), {.permits = 2}); },
                                             {"permits", "shared"}));
}

INSTANTIATE_TEST_SUITE_P(Backends, SharedHolds, ::testing::ValuesIn(all_backends()), BackendParamName());

}  // namespace
}  // namespace dlock::test
