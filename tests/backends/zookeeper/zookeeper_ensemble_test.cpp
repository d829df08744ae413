// zookeeper:// on private servers each case starts (scripts/servers/zookeeper.sh, Debian's
// ZooKeeper 3.8): the leader of a 3-node ensemble killed while a held key is contended, a holder
// killed with SIGKILL, the ensemble unreachable (SIGSTOP), a force-release, waiters giving up,
// a semaphore's waiters woken by any holder's release, a reader evicted with a lock delay, a
// server restart, and digest credentials.
//
// Safety is judged from outside the library: holders write what they did to a shared log (the
// interval in which they used the lock and its fencing token) and update a shared counter by
// read-sleep-write, so two holders at once show as overlapping intervals and lost updates; a
// holder uses the lock only while lease.held() and before lease.valid_until(). Times are
// measured here, by this process's steady clock, never taken from what the library reports.
//
// Every case skips when ZooKeeper is not installed (/usr/share/java/zookeeper.jar).

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/errors.hpp"
#include "support/child_process.hpp"
#include "support/failover_contention.hpp"
#include "support/holders.hpp"
#include "support/loss_record.hpp"
#include "support/server_test.hpp"
#include "support/zookeeper_servers.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using test::LossRecord;
using test::sole_holder;
using Clock = std::chrono::steady_clock;

using test::eventually;
using test::ms;
using test::random_hex;

class ZooKeeper : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::ZooKeeperServers::installed()) {
      GTEST_SKIP()
          << "ZooKeeper is not installed (/usr/share/java/zookeeper.jar; Debian: apt-get install zookeeper)";
    }
    // The library's warnings (failed renewals and releases during a failover), timed from the
    // start of the case, so a failure can be read against the case's own events.
    set_log_handler([begun = begun_](LogLevel level, std::string_view message) {
      if (level < LogLevel::info) return;
      std::fprintf(stderr, "dlock [+%lld ms]: %.*s\n", ms(Clock::now() - begun),
                   static_cast<int>(message.size()), message.data());
    });
  }
  void TearDown() override {
    set_log_handler([](LogLevel level, std::string_view message) {
      if (level >= LogLevel::warning)
        std::fprintf(stderr, "dlock: %.*s\n", static_cast<int>(message.size()), message.data());
    });
  }

  void start(int nodes) { servers_ = std::make_unique<test::ZooKeeperServers>(DLOCK_SERVER_SCRIPT, nodes); }

  // `base` (zookeeper://HOSTS, no path) with this case's own root path and `options`.
  std::string url(const std::string& base, const std::string& options = {}) const {
    return base + "/dlock-test-" + run_ + (options.empty() ? "" : "?" + options);
  }
  std::string key(const std::string& name = "k") const {
    return std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/" + name;
  }
  long long since_begun(Clock::time_point t) const { return ms(t - begun_); }

  const Clock::time_point begun_ = Clock::now();
  std::unique_ptr<test::ZooKeeperServers> servers_;
  std::string run_ = random_hex(8);
};

// ---- The leader killed under contention ----

// A 3-node ensemble; 4 clients contend for one key; about 2 s in the leader is killed (SIGKILL)
// while one of them holds the key, and they go on for 6 s (support/failover_contention.hpp
// judges the run).
TEST_F(ZooKeeper, LeaderKilledWhileAHeldKeyIsContended) {
  start(3);
  const std::string ensemble = url(servers_->ensemble_url(), "session_timeout=4s");
  const auto run = test::contend_through_failover(ensemble, key(), 4, 6s, [&] {
    const int leader = servers_->leader();
    servers_->kill(leader, "KILL");
    return leader;
  });
  RecordProperty("acquisitions", run.acquisitions);
  test::expect_safe_failover(run, ensemble, key());
}

// ---- A holder killed with SIGKILL ----

// A holder process killed with -9 never releases: its node goes when the ensemble expires its
// session, 2 s after it last heard from it, and the waiting client takes the key then.
TEST_F(ZooKeeper, HolderKilledWithSigkillFreesWithinSessionTimeoutPlusOneSecond) {
  start(1);
  const std::string u = url(servers_->url(), "session_timeout=2s");
  const std::string k = key();
  const std::string ready = (servers_->dir() / "ready").string();
  test::ChildProcess holder({DLOCK_CONFORMANCE_WORKER, "hold", u, k, "30000", ready});
  std::optional<std::string> line;
  ASSERT_TRUE(
      eventually(
          [&] { return (line = test::read_file(ready)).has_value() || holder.wait_for(0ms).has_value(); },
          20s) &&
      line)
      << "the holder never took the key";
  const std::uint64_t dead_token = std::stoull(*line);
  Client other = Client::open(u);
  {
    auto busy = other.try_acquire(k);
    ASSERT_FALSE(busy) << "the key was free while the worker held it";
    const auto named = sole_holder(busy.holders());
    ASSERT_TRUE(named);
    EXPECT_EQ(named->token, dead_token);
  }
  std::this_thread::sleep_for(500ms);  // a ping or two: the session's last contact is recent

  const auto killed = Clock::now();
  holder.kill(SIGKILL);
  ASSERT_EQ(holder.wait_for(5s), 128 + SIGKILL);
  auto attempt = other.try_acquire_for(k, 10s);
  const auto took = ms(Clock::now() - killed);
  std::printf("key taken %lld ms after the holder's SIGKILL (session_timeout 2000 ms)\n", took);
  RecordProperty("ms_from_kill_to_acquire", static_cast<int>(took));
  ASSERT_TRUE(attempt) << "the key was not freed within 10 s of the holder's death";
  EXPECT_LE(took, 3000) << "ms: not within session_timeout + 1 s";
  // The ensemble heard from the holder at most ~0.7 s before the kill (pings every third of the
  // session): freeing the key much earlier would betray a holder that was merely cut off.
  EXPECT_GE(took, 1000) << "ms: freed before the holder's session could have expired";
  EXPECT_GT(attempt.lease().token(), dead_token);
}

// ---- The ensemble unreachable ----

// The only server stops answering (SIGSTOP) under a holder with auto-renewal. The holder must
// stop trusting its lock before the ensemble could have expired its session: within
// session_timeout (+ 0.5 s) of its last contact, which was no earlier than a ping answered just
// before the stop. Once the server runs again and the holder has let go of its lost lease, the
// key can be taken, with a greater token.
TEST_F(ZooKeeper, EnsembleUnreachableHolderStopsBeforeTheSessionCouldExpire) {
  start(1);
  const std::string u = url(servers_->url(), "session_timeout=2s");
  const std::string k = key();
  Client holder = Client::open(u);
  Lease lease = holder.acquire(k);  // auto-renewing; the store grants the 2 s session
  const std::uint64_t token = lease.token();
  auto loss = std::make_shared<LossRecord>();
  lease.on_lost([loss](const LossInfo& info) { loss->set(info); });
  std::promise<Clock::time_point> stopped_promise;
  auto stopped = stopped_promise.get_future();
  std::stop_callback on_stop(lease.stop_token(), [&] { stopped_promise.set_value(Clock::now()); });
  std::this_thread::sleep_for(1500ms);  // renewals run
  ASSERT_TRUE(lease.held());

  const auto contact = Clock::now();
  holder.ping();  // the session's last contact is after `contact`
  servers_->kill(1, "STOP");
  struct Resume {
    test::ZooKeeperServers& servers;
    bool done = false;
    void operator()() {
      if (!done) servers.kill(1, "CONT");
      done = true;
    }
    ~Resume() {
      try {
        (*this)();
      } catch (...) {
      }
    }
  } resume{*servers_};

  ASSERT_EQ(stopped.wait_for(10s), std::future_status::ready) << "the stop token never fired";
  const auto stop_ms = ms(stopped.get() - contact);
  ASSERT_TRUE(eventually([&] { return loss->when().has_value(); }, 2s)) << "on_lost never ran";
  const auto lost_ms = ms(*loss->when() - contact);
  std::printf("stop token %lld ms, on_lost %lld ms after the last contact (session_timeout 2000 ms): %s\n",
              stop_ms, lost_ms, loss->message().c_str());
  RecordProperty("ms_contact_to_loss", static_cast<int>(lost_ms));
  EXPECT_LE(stop_ms, 2500) << "ms: the holder went on trusting the lock after its session could have expired";
  EXPECT_LE(lost_ms, 2500) << "ms: on_lost ran after the session could have expired";
  EXPECT_FALSE(lease.held());
  EXPECT_TRUE(lease.lost());

  // Past the session timeout while stopped. On SIGCONT the server usually expires the session
  // at once; but when the holder's reconnection is handled before the server's session expiry
  // runs, the session lives on, and with it the holder's node (as lease_is_the_session says:
  // a holder that lives keeps the key). Which of the two happened is recorded, not asserted.
  std::this_thread::sleep_for(std::max(0ms, 3000ms - std::chrono::milliseconds(ms(Clock::now() - contact))));
  resume();
  const auto resumed = Clock::now();
  Client other = Client::open(u);
  auto attempt = other.try_acquire_for(k, 2s);
  std::string outcome = "the ensemble expired the holder's session on its return";
  if (!attempt) {
    const auto named = sole_holder(attempt.holders());
    outcome = "the holder's session survived: its node still held the key, " +
              (named ? "owner " + named->owner + " token " + std::to_string(named->token)
                     : std::string("no holder named")) +
              ", until the holder let go of its lost lease";
  }
  // The holder lets go of the lease it learnt it lost, as a holder told of a loss does: that
  // frees the key if the store still held it, and never touches a newer holder.
  EXPECT_THROW(lease.release(), LockLostError);
  if (!attempt) attempt = other.try_acquire_for(k, 5s);
  const auto took = ms(Clock::now() - resumed);
  std::printf("key taken %lld ms after SIGCONT; %s\n", took, outcome.c_str());
  RecordProperty("after_sigcont", outcome);
  ASSERT_TRUE(attempt) << "the key was not free within 7 s of the server's return (" << outcome << ")";
  EXPECT_LE(took, 5000) << "ms from SIGCONT to another client's acquisition";
  EXPECT_GT(attempt.lease().token(), token);
  const auto now_held = sole_holder(other.inspect(k));
  ASSERT_TRUE(now_held);
  EXPECT_EQ(now_held->token, attempt.lease().token()) << "the old holder's release touched the new holder";
}

// ---- Force-release ----

// An immediate force-release deletes the holder's node: the holder's watch tells it within a
// second, and another client takes the key at once.
TEST_F(ZooKeeper, ForceReleaseDeletesTheNodeAndTheHolderLearns) {
  start(1);
  const std::string u = url(servers_->url());
  const std::string k = key();
  Client holder = Client::open(u);
  Client admin = Client::open(u);
  Client third = Client::open(u);
  Lease lease = holder.acquire(k);
  auto loss = std::make_shared<LossRecord>();
  lease.on_lost([loss](const LossInfo& info) { loss->set(info); });
  EXPECT_FALSE(third.try_acquire(k)) << "the key was free while held";

  const auto forced = Clock::now();
  const auto released = sole_holder(admin.force_release(k, Eviction::immediate));
  ASSERT_TRUE(released);
  EXPECT_EQ(released->token, lease.token());
  EXPECT_EQ(released->owner, lease.owner());
  auto next = third.try_acquire(k);
  ASSERT_TRUE(next) << "the key was not free at once after an immediate force-release";
  EXPECT_GT(next.lease().token(), lease.token());
  ASSERT_TRUE(eventually([&] { return loss->when().has_value(); }, 5s))
      << "the evicted holder was never told";
  const auto told = ms(*loss->when() - forced);
  std::printf("the holder learnt of the force-release after %lld ms\n", told);
  EXPECT_LE(told, 1000) << "ms from the force-release to the holder's on_lost";
  EXPECT_EQ(loss->reason(), LossReason::not_owner);
  EXPECT_FALSE(lease.held());
  EXPECT_THROW(lease.release(), LockLostError);
  const auto now_held = sole_holder(admin.inspect(k));
  ASSERT_TRUE(now_held);
  EXPECT_EQ(now_held->token, next.lease().token()) << "the evicted holder's release touched the new holder";
}

// ---- Waiters that give up ----

// Each waiter watches the two nodes before its own and takes the key, without reading the
// queue, once it has seen every node that was before it at its last look deleted. Waiters
// giving up in the middle of the queue must neither stall it nor change its order: with H
// holding and W1..W4 queued in that order, W1 and W3 give up; then the key goes to W2 and
// then to W4, each woken by its watch (the fallback retry is the 10 s session timeout), and
// never to two at once.
TEST_F(ZooKeeper, WaitersGivingUpMidQueueKeepItsOrder) {
  start(1);
  const std::string u = url(servers_->url(), "session_timeout=10s");
  const std::string k = key();
  Client holder_client = Client::open(u);
  Lease held = holder_client.acquire(k);

  struct Waiter {
    Client client;
    std::future<bool> took;
  };
  std::mutex log_mutex;
  std::vector<std::pair<int, Clock::time_point>> order;  // who took the key, when
  std::vector<Waiter> waiters;
  waiters.reserve(4);  // each thread keeps a reference to its client
  for (int i = 1; i <= 4; ++i) {
    const bool gives_up = i == 1 || i == 3;
    waiters.push_back({Client::open(u), {}});
    Client& client = waiters.back().client;
    waiters.back().took = std::async(std::launch::async, [&, i, gives_up, &client = client] {
      Attempt attempt = client.try_acquire_for(k, gives_up ? 2s : 30s);
      if (!attempt) return false;
      {
        std::lock_guard lock(log_mutex);
        order.emplace_back(i, Clock::now());
      }
      std::this_thread::sleep_for(50ms);
      attempt.lease().release();
      return true;
    });
    // The next waiter queues only once this one is in the queue: the order is W1..W4.
    ASSERT_TRUE(eventually(
        [&] {
          const auto info = sole_holder(holder_client.inspect(k));
          return info && info->queue && info->queue->size() == static_cast<std::size_t>(i);
        },
        5s))
        << "waiter " << i << " never showed in the queue";
  }
  EXPECT_FALSE(waiters[0].took.get()) << "W1 took the key while H held it";
  EXPECT_FALSE(waiters[2].took.get()) << "W3 took the key while H held it";
  const auto released = Clock::now();
  held.release();
  ASSERT_EQ(waiters[1].took.wait_for(8s), std::future_status::ready) << "W2 was not woken by H's release";
  EXPECT_TRUE(waiters[1].took.get());
  ASSERT_EQ(waiters[3].took.wait_for(8s), std::future_status::ready) << "W4 was not woken by W2's release";
  EXPECT_TRUE(waiters[3].took.get());
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0].first, 2) << "the key went out of queue order";
  EXPECT_EQ(order[1].first, 4) << "the key went out of queue order";
  EXPECT_GE(order[1].second - order[0].second, 50ms) << "W4 took the key while W2 held it";
  std::printf("W2 took the key %lld ms after H released it, W4 %lld ms after W2 took it\n",
              ms(order[0].second - released), ms(order[1].second - order[0].second));
}

// ---- Shared holds ----

// A semaphore waiter watches the `permits` nodes before its own, so the release of any holder
// wakes it: with A, B and C holding a semaphore of 3 and D, E queued in that order, B's release
// (neither the first holder nor D's predecessor) lets D in, and A's then lets E in, each at
// once (the fallback retry is the 10 s session timeout).
TEST_F(ZooKeeper, ASemaphoreWaiterIsWokenByTheReleaseOfAnyHolderBeforeIt) {
  start(1);
  const std::string u = url(servers_->url(), "session_timeout=10s");
  const std::string k = key();
  const LockOptions permit{.mode = LockMode::shared, .permits = 3};
  Client admin = Client::open(u);
  std::vector<Client> clients;
  std::vector<Lease> held;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(Client::open(u));
    held.push_back(clients.back().acquire(k, permit));
  }
  Client d_client = Client::open(u), e_client = Client::open(u);
  const auto queued = [&](std::size_t waiters) {
    return eventually(
        [&] {
          const auto holders = admin.inspect(k);
          return holders.size() == 3 && holders[0].queue && holders[0].queue->size() == waiters;
        },
        5s);
  };
  auto d = std::async(std::launch::async, [&] { return d_client.try_acquire_for(k, 20s, permit); });
  ASSERT_TRUE(queued(1)) << "D never showed in the queue";
  auto e = std::async(std::launch::async, [&] { return e_client.try_acquire_for(k, 20s, permit); });
  ASSERT_TRUE(queued(2)) << "E never showed in the queue";

  // `leaving`'s release lets `waiter` in at once, and it keeps its permit; `what`: "B's release
  // woke D".
  std::vector<Attempt> taken;
  const auto lets_in = [&taken](Lease& leaving, std::future<Attempt>& waiter, const std::string& what) {
    const auto released = Clock::now();
    leaving.release();
    ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready) << "not so: " << what;
    taken.push_back(waiter.get());
    ASSERT_TRUE(taken.back());
    std::printf("%s after %lld ms\n", what.c_str(), ms(Clock::now() - released));
    EXPECT_LT(ms(Clock::now() - released), 3000) << "ms: " << what << " only by the fallback retry";
  };
  lets_in(held[1], d, "B's release woke D");
  EXPECT_EQ(e.wait_for(300ms), std::future_status::timeout) << "E took a fourth permit";
  lets_in(held[0], e, "A's release woke E");
  EXPECT_EQ(admin.inspect(k).size(), 3u);
}

// A reader force-released with a lock delay keeps its node, and so its place as a holder: a
// writer waits until that reader's release acknowledges the loss, though the other reader left.
TEST_F(ZooKeeper, AReaderEvictedWithALockDelayKeepsTheWriterOut) {
  start(1);
  const std::string u = url(servers_->url());
  const std::string k = key();
  const LockOptions reader{.mode = LockMode::shared};
  Client a = Client::open(u), b = Client::open(u), admin = Client::open(u), writer = Client::open(u);
  Lease first = a.acquire(k, reader);
  Lease second = b.acquire(k, reader);
  const auto evicted = admin.force_release(k, Eviction::delayed, first.token());
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].token, first.token());
  EXPECT_EQ(evicted[0].mode, LockMode::shared);
  ASSERT_TRUE(eventually([&] { return !first.held(); }, 5s)) << "the evicted reader was never told";
  second.release();

  Attempt refused = writer.try_acquire_for(k, 500ms);
  EXPECT_FALSE(refused) << "a writer got the key while an evicted reader was on record";
  if (!refused) {
    ASSERT_EQ(refused.holders().size(), 1u);
    EXPECT_TRUE(refused.holders()[0].evicted);
    EXPECT_EQ(refused.holders()[0].token, first.token());
  }
  auto waiting = std::async(std::launch::async, [&] { return writer.try_acquire_for(k, 10s); });
  std::this_thread::sleep_for(200ms);
  EXPECT_THROW(first.release(), LockLostError);
  Attempt took = waiting.get();
  ASSERT_TRUE(took) << "the evicted reader's release did not let the writer in";
  EXPECT_GT(took.lease().token(), second.token());
}

// ---- A server restart ----

TEST_F(ZooKeeper, TokensRiseAcrossAServerRestart) {
  start(1);
  const std::string u = url(servers_->url());
  const std::string k = key();
  std::uint64_t before = 0;
  {
    Client client = Client::open(u);
    Lease lease = client.acquire(k);
    before = lease.token();
    lease.release();
  }
  servers_->restart(1);
  Client client = Client::open(u);
  Lease lease = client.acquire(k);
  EXPECT_GT(lease.token(), before) << "a token after the restart is not above the one before";
  lease.release();
}

// ---- Credentials ----

// Digest credentials in the URL: nodes are made with ZOO_CREATOR_ALL_ACL, so only the same
// user reaches them. Neither Client::url() nor any error shows a password; a client with other
// credentials (or none) gets an error naming the fix.
TEST_F(ZooKeeper, SecretsNeverPrinted) {
  start(1);
  const std::string address = servers_->url().substr(std::string("zookeeper://").size());
  const std::string alice_pw = "alice-pw-4711", bob_pw = "bob-pw-4712", wrong_pw = "wrong-pw-4713";
  const auto at = [&](const std::string& userinfo) {
    return url("zookeeper://" + (userinfo.empty() ? "" : userinfo + "@") + address);
  };
  const auto no_secret = [&](const std::string& text) {
    for (const auto& secret : {alice_pw, bob_pw, wrong_pw}) {
      EXPECT_EQ(text.find(secret), std::string::npos) << "a password is shown: " << text;
    }
  };
  const std::string k = key();

  Client alice = Client::open(at("alice:" + alice_pw));
  no_secret(alice.url());
  EXPECT_NE(alice.url().find("alice"), std::string::npos) << alice.url();
  Lease lease = alice.acquire(k);
  {
    // Another client of the same user reaches the nodes.
    Client again = Client::open(at("alice:" + alice_pw));
    auto busy = again.try_acquire(k);
    EXPECT_FALSE(busy);
    const auto named = sole_holder(busy.holders());
    ASSERT_TRUE(named);
    EXPECT_EQ(named->token, lease.token());
  }

  const std::vector<std::string> others = {"bob:" + bob_pw, "alice:" + wrong_pw, ""};
  for (const auto& userinfo : others) {
    Client other = Client::open(at(userinfo));
    no_secret(other.url());
    SCOPED_TRACE(other.url());
    for (const bool wait : {false, true}) {
      try {
        auto attempt = wait ? other.try_acquire_for(k, 1s) : other.try_acquire(k);
        ADD_FAILURE() << "a client without alice's credentials reached her nodes (acquired: "
                      << attempt.acquired() << ")";
      } catch (const ConfigurationError& e) {
        const std::string message = e.what();
        if (!wait) std::printf("%s: %s\n", other.url().c_str(), message.c_str());
        no_secret(message);
        EXPECT_NE(message.find("USER:PASSWORD@"), std::string::npos) << "the fix is not named: " << message;
        EXPECT_NE(message.find("credentials"), std::string::npos) << message;
      } catch (const Error& e) {
        ADD_FAILURE() << "not a configuration error: " << e.what();
        no_secret(e.what());
      }
    }
    try {
      other.inspect(k);
      ADD_FAILURE() << "inspect read alice's nodes";
    } catch (const Error& e) {
      no_secret(e.what());
    }
  }
  lease.release();
  EXPECT_TRUE(Client::open(at("alice:" + alice_pw)).try_acquire(k))
      << "alice's other client could not take the key";

  // Nothing listens on port 1: the connection error shows the URL without its password.
  try {
    Client::open("zookeeper://alice:" + alice_pw + "@127.0.0.1:1/x?connect_timeout=500ms");
    ADD_FAILURE() << "a client opened on a port nobody listens on";
  } catch (const Error& e) {
    no_secret(e.what());
  }
}

}  // namespace
}  // namespace dlock
