// redis:// on a real server, through the public API: the script cache flushed under a held
// lock, a restart without persistence (the holder learns of the loss), set-up errors (TLS,
// credentials, an unreachable server), sockets close-on-exec, fencing after expiry and
// collect_idle, force-release (at once, with a lock delay, its notices), a waiter killed with
// -9, fair mode's FIFO order (and its readers behind a waiting writer), 64 waiters on one key,
// and sets of keys in one script (acquire_set, release_set).
//
// The shared server is the one scripts/servers/redis.sh starts (scripts/test.sh does), named by
//   DLOCK_REDIS_URL        ACL user with every command (every case needs it, or skips)
//   DLOCK_REDIS_PLAIN_URL  the default user's password (plain AUTH)
// The restart case starts a private server of its own, so it never disturbs other tests.
// Run as `redis_backend_tests --wait URL KEY TTL_MS`, this program is the waiter the -9 case kills.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/redis/connection.hpp"
#include "backends/registry.hpp"
#include "core/url.hpp"
#include "dlock/client.hpp"
#include "dlock/errors.hpp"
#include "support/child_process.hpp"
#include "support/holders.hpp"
#include "support/redis_servers.hpp"
#include "support/server_test.hpp"


namespace dlock {
namespace {

using namespace std::chrono_literals;
using test::sole_holder;
using Clock = std::chrono::steady_clock;

using test::env;
using test::eventually;
using test::ms;
using test::random_hex;
using test::with_option;

// A raw connection, for what dlock itself never does: SCRIPT FLUSH, reading its keys.
class Raw {
 public:
  explicit Raw(const std::string& url) {
    const auto parsed = core::Url::parse(url);
    core::UrlOptions options(parsed);
    endpoint_ = backends::redis::parse_endpoint(parsed, options);
    connection_ = std::make_unique<backends::redis::Connection>(endpoint_);
  }
  std::string text(const std::vector<std::string_view>& command) {
    return backends::redis::text(connection_->command(command).get());
  }
  long long integer(const std::vector<std::string_view>& command) {
    return backends::redis::integer(connection_->command(command).get());
  }
  // The queue of waiters on `key` (lua/common.lua).
  long long queued(const std::string& key) { return integer({"LLEN", "dlock:{" + key + "}:q"}); }
  // Connections subscribed to the force-release notices of namespace `dlock`.
  long long subscribers() {
    const auto reply = connection_->command({"PUBSUB", "NUMSUB", "dlock:evicted"});
    return backends::redis::integer(reply->element[1]);
  }

 private:
  backends::redis::Endpoint endpoint_;
  std::unique_ptr<backends::redis::Connection> connection_;
};

class Redis : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto url = env("DLOCK_REDIS_URL");
    if (!url) {
      GTEST_SKIP() << "DLOCK_REDIS_URL is not set: start a server with scripts/servers/redis.sh start DIR and "
                      "source DIR/env";
    }
    url_ = *url;
  }

  std::string key(const std::string& name = "k") const {
    return "redis-test/" + run_ + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/" + name;
  }

  // `waiter` waiting for `k` in the background (up to 20 s, for a 10 s TTL), once `raw` sees it
  // queued behind `ahead` others.
  static std::future<Attempt> queue_waiter(Client& waiter, const std::string& k, Raw& raw, long long ahead = 0) {
    auto waiting = std::async(std::launch::async, [&waiter, k] { return waiter.try_acquire_for(k, 20s, {.ttl = 10s}); });
    EXPECT_TRUE(eventually([&] { return raw.queued(k) == ahead + 1; }, 5s)) << "the waiter never queued";
    return waiting;
  }

  std::string url_;
  std::string run_ = random_hex(8);
};

// Every script runs again after the server forgot them (SCRIPT FLUSH): EVALSHA's NOSCRIPT makes
// the client load the script and run it once more.
TEST_F(Redis, ScriptsAreLoadedAgainAfterScriptFlush) {
  Client client = Client::open(url_);
  Client admin = Client::open(url_);
  Raw raw(url_);
  const std::string k = key();
  Lease lease = client.acquire(k, {.ttl = 10s});
  const std::uint64_t token = lease.token();
  EXPECT_EQ(raw.text({"SCRIPT", "FLUSH"}), "OK");
  lease.renew(10s);
  EXPECT_TRUE(lease.held());
  EXPECT_EQ(raw.text({"SCRIPT", "FLUSH"}), "OK");
  ASSERT_FALSE(admin.inspect(k).empty());
  EXPECT_EQ(raw.text({"SCRIPT", "FLUSH"}), "OK");
  EXPECT_FALSE(admin.try_acquire(k)) << "an acquire after SCRIPT FLUSH took a held key";
  EXPECT_EQ(raw.text({"SCRIPT", "FLUSH"}), "OK");
  EXPECT_NO_THROW(lease.release());
  EXPECT_EQ(raw.text({"SCRIPT", "FLUSH"}), "OK");
  auto again = admin.try_acquire(k);
  ASSERT_TRUE(again);
  EXPECT_GT(again.lease().token(), token);
  EXPECT_EQ(raw.text({"SCRIPT", "FLUSH"}), "OK");
  EXPECT_EQ(admin.list(k).locks.size(), 1u);
  EXPECT_EQ(raw.text({"SCRIPT", "FLUSH"}), "OK");
  EXPECT_FALSE(client.force_release(k).empty());
  EXPECT_EQ(raw.text({"SCRIPT", "FLUSH"}), "OK");
  admin.collect_idle();
}

// A server of its own, restarted without persistence: the lock is gone, the holder's next
// renewal finds that and reports the loss, a blocked waiter gets the key, and tokens keep rising.
TEST_F(Redis, RestartWithoutPersistenceIsALossForTheHolder) {
  test::RedisServers server(DLOCK_SERVER_SCRIPT, 1);
  const std::string url = server.url(0);

  Client holder = Client::open(url);
  Client waiter = Client::open(url);
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 3s, .auto_renew = true});
  const std::uint64_t token = lease.token();
  std::promise<LossInfo> lost;
  lease.on_lost([&](const LossInfo& info) { lost.set_value(info); });
  Raw raw(url);
  auto waiting = queue_waiter(waiter, k, raw);

  server.restart(0);

  auto loss = lost.get_future();
  ASSERT_EQ(loss.wait_for(30s), std::future_status::ready) << "the holder never learnt that the lock was gone";
  EXPECT_EQ(loss.get().reason, LossReason::not_owner);
  EXPECT_TRUE(lease.lost());
  ASSERT_EQ(waiting.wait_for(15s), std::future_status::ready);
  auto attempt = waiting.get();
  ASSERT_TRUE(attempt) << "the waiter did not get the key after the restart";
  EXPECT_GT(attempt.lease().token(), token) << "a token after the restart is not above the one before";
}

TEST_F(Redis, RedissIsRefusedNamingTheReason) {
  try {
    Client::open("rediss://dlock:secret-pw@127.0.0.1:6379/0");
    FAIL() << "rediss:// was accepted";
  } catch (const ConfigurationError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("TLS"), std::string::npos) << message;
    EXPECT_NE(message.find("hiredis"), std::string::npos) << message;
    EXPECT_EQ(message.find("secret-pw"), std::string::npos) << message;
  }
}

TEST_F(Redis, WrongPasswordOrUnknownUserIsAClearErrorWithoutThePassword) {
  const core::Url good = core::Url::parse(url_);
  const std::string address = good.host + ":" + std::to_string(good.port.value_or(6379)) + "/0";
  const std::vector<std::string> bad = {
      "redis://" + good.user + ":not-the-pw-4711@" + address,
      "redis://nobody-" + run_ + ":not-the-pw-4711@" + address,
      "redis://:not-the-pw-4711@" + address,
  };
  for (const auto& url : bad) {
    SCOPED_TRACE(core::Url::parse(url).redacted());
    try {
      Client::open(url).try_acquire(key());
      ADD_FAILURE() << "bad credentials were accepted";
    } catch (const ConfigurationError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.find("not-the-pw-4711"), std::string::npos) << message;
      EXPECT_NE(message.find("password"), std::string::npos) << message;
      EXPECT_NE(message.find(address), std::string::npos) << message;
    }
  }
  // No password where the server wants one.
  try {
    Client::open("redis://" + address).try_acquire(key());
    ADD_FAILURE() << "a URL without a password was accepted";
  } catch (const ConfigurationError& e) {
    EXPECT_NE(std::string(e.what()).find("password"), std::string::npos) << e.what();
  }
  if (const auto plain = env("DLOCK_REDIS_PLAIN_URL")) {
    EXPECT_TRUE(Client::open(*plain).try_acquire(key("plain"))) << "plain AUTH with the right password failed";
  }
}

// Defect 8: `redis://SECRET@host` was taken for a user name, refused, and echoed verbatim in
// the error. A lone userinfo is the password, as for redis-cli -u, Jedis and redis-py.
TEST_F(Redis, LoneUserinfoIsThePasswordAndNeverShown) {
  const auto plain = env("DLOCK_REDIS_PLAIN_URL");
  if (!plain) GTEST_SKIP() << "DLOCK_REDIS_PLAIN_URL is not set";
  const core::Url parsed = core::Url::parse(*plain);  // redis://:PASSWORD@host:port/0
  const std::string address = parsed.host + ":" + std::to_string(parsed.port.value_or(6379)) + "/0";
  const std::string secret = parsed.password;
  ASSERT_FALSE(secret.empty());
  try {
    Client client = Client::open("redis://" + secret + "@" + address);
    EXPECT_TRUE(client.try_acquire(key())) << "the lone userinfo did not authenticate as the password";
    EXPECT_EQ(client.url().find(secret), std::string::npos) << client.url();
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
    EXPECT_EQ(std::string(e.what()).find(secret), std::string::npos) << "the error shows the password";
  }
  try {
    Client::open("redis://not-the-pw-4711@" + address);
    ADD_FAILURE() << "a wrong lone password was accepted";
  } catch (const ConfigurationError& e) {
    EXPECT_EQ(std::string(e.what()).find("not-the-pw-4711"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(address), std::string::npos) << e.what();
  }
}

// A user without pub/sub channels (Redis 7's default for a new user) still locks and
// force-releases: only the notices are missing, and a warning at open names the fix.
TEST_F(Redis, UserWithoutTheNoticeChannelStillForceReleases) {
  Raw raw(url_);
  const std::string user = "nochannel-" + run_;
  EXPECT_EQ(raw.text({"ACL", "SETUSER", user, "on", ">pw-4711", "~dlock:*", "resetchannels", "+@all"}), "OK");
  struct Drop {
    Raw& raw;
    const std::string& user;
    ~Drop() { raw.integer({"ACL", "DELUSER", user}); }
  } drop{raw, user};
  std::vector<std::string> warnings;
  std::mutex mutex;
  set_log_handler([&](LogLevel level, std::string_view message) {
    std::lock_guard lock(mutex);
    if (level == LogLevel::warning && message.find("SUBSCRIBE") != std::string_view::npos) {
      warnings.emplace_back(message);
    }
  });
  const core::Url good = core::Url::parse(url_);
  const std::string url = "redis://" + user + ":pw-4711@" + good.host + ":" + std::to_string(*good.port) + "/0";
  {
    Client client = Client::open(url);
    const std::string k = key();
    Lease lease = client.acquire(k, {.ttl = 10s});
    const auto released = sole_holder(client.force_release(k));
    ASSERT_TRUE(released);
    EXPECT_EQ(released->token, lease.token());
    EXPECT_THROW(lease.renew(), LockLostError);
    EXPECT_THROW(lease.release(), LockLostError);
    EXPECT_TRUE(client.try_acquire(k));
  }
  set_log_handler([](LogLevel level, std::string_view message) {  // as the default handler
    if (level >= LogLevel::warning) std::fprintf(stderr, "dlock: %.*s\n", static_cast<int>(message.size()), message.data());
  });
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("&dlock:evicted"), std::string::npos) << warnings[0];
  EXPECT_EQ(warnings[0].find("pw-4711"), std::string::npos) << warnings[0];
}

// The sockets to the Redis server in this process (peers on `port`).
std::vector<int> sockets_to(int port) {
  std::vector<int> fds;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(entry.path().filename().string());
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) continue;
    int peer_port = 0;
    if (peer.ss_family == AF_INET) peer_port = ntohs(reinterpret_cast<sockaddr_in*>(&peer)->sin_port);
    if (peer.ss_family == AF_INET6) peer_port = ntohs(reinterpret_cast<sockaddr_in6*>(&peer)->sin6_port);
    if (peer_port == port) fds.push_back(fd);
  }
  return fds;
}

// Defect 1: the hiredis sockets were not close-on-exec, so `dlock run` handed them to the
// command. Every connection a client opens (pooled, a waiter's, the notice subscriber's) must be.
TEST_F(Redis, BackendSocketsAreCloseOnExec) {
  Client holder = Client::open(url_);
  Client waiter = Client::open(url_);
  Raw raw(url_);
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s});
  auto waiting = queue_waiter(waiter, k, raw);
  const auto fds = sockets_to(core::Url::parse(url_).port.value_or(6379));
  // The holder's pooled connection, the waiter's and the test's own at least.
  EXPECT_GE(fds.size(), 3u);
  for (const int fd : fds) {
    const int flags = ::fcntl(fd, F_GETFD);
    EXPECT_TRUE(flags >= 0 && (flags & FD_CLOEXEC) != 0) << "fd " << fd << " to the Redis server is not close-on-exec";
  }
  lease.release();
  EXPECT_TRUE(waiting.get());
}

TEST_F(Redis, ServerDownAtStartUpIsAConnectionError) {
  // A port nothing listens on: bound, then closed.
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port = ntohs(address.sin_port);
    ::close(fd);
  }
  const std::string url = "redis://dlock:secret-pw@127.0.0.1:" + std::to_string(port) + "/0?connect_timeout=1s";
  try {
    Client::open(url);
    FAIL() << "opening a server that is down succeeded";
  } catch (const ConnectionError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(e.retryable());
    EXPECT_NE(message.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << message;
    EXPECT_EQ(message.find("secret-pw"), std::string::npos) << message;
  }
}

// Tokens rise across an expiry and across collect_idle, which removes the key's counter.
TEST_F(Redis, FencingTokensRiseAfterExpiryAndCollectIdle) {
  Client client = Client::open(url_);
  Raw raw(url_);
  const std::string k = key();
  const std::string seq = "dlock:{" + k + "}:seq";
  std::uint64_t last = 0;
  {
    Lease lease = client.acquire(k, {.ttl = 100ms});
    last = lease.token();
    lease.detach();  // left to expire
  }
  ASSERT_TRUE(eventually([&] { return client.inspect(k).empty(); }, 5s));
  {
    Lease lease = client.acquire(k, {.ttl = 10s});
    EXPECT_GT(lease.token(), last) << "after an expiry";
    last = lease.token();
  }
  EXPECT_EQ(raw.integer({"EXISTS", seq}), 1);
  EXPECT_GE(client.collect_idle(), 1u);
  EXPECT_EQ(raw.integer({"EXISTS", seq}), 0) << "collect_idle left the free key's counter";
  {
    Lease lease = client.acquire(k, {.ttl = 10s});
    EXPECT_GT(lease.token(), last) << "after collect_idle";
    // A held key is not collected.
    client.collect_idle();
    EXPECT_EQ(raw.integer({"EXISTS", seq}), 1);
  }
}

// An immediate force_release hands the key to a waiter at once: the waiter does not wait out
// the 30 s lease.
TEST_F(Redis, ForceReleaseWakesAWaiter) {
  Client holder = Client::open(url_);
  Client waiter = Client::open(url_);
  Raw raw(url_);
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s});
  auto waiting = queue_waiter(waiter, k, raw);
  const auto start = Clock::now();
  ASSERT_FALSE(holder.force_release(k, Eviction::immediate).empty());
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready) << "the waiter was not woken";
  EXPECT_TRUE(waiting.get());
  EXPECT_LT(ms(Clock::now() - start), 2000);
  EXPECT_THROW(lease.release(), LockLostError);
}

// A force-release with a lock delay keeps the queue as it is, lets no newcomer in (fair or
// not), and the evicted holder's release hands the key to the first waiter.
TEST_F(Redis, LockDelayKeepsTheQueueUntilTheHoldersRelease) {
  for (const std::string& url : {url_, with_option(url_, "fair=true")}) {
    SCOPED_TRACE(url);
    Client holder = Client::open(url);
    Client waiter = Client::open(url);
    Client newcomer = Client::open(url);
    Raw raw(url_);
    const std::string k = key(url == url_ ? "plain" : "fair");
    Lease lease = holder.acquire(k, {.ttl = 30s});
    auto waiting = queue_waiter(waiter, k, raw);
    ASSERT_FALSE(newcomer.force_release(k).empty());
    auto barging = newcomer.try_acquire(k);
    EXPECT_FALSE(barging) << "a newcomer took the key under the lock delay";
    if (const auto named = sole_holder(barging.holders())) {
      EXPECT_TRUE(named->evicted);
    }
    EXPECT_EQ(raw.queued(k), 1) << "the lock delay touched the queue";
    const auto start = Clock::now();
    EXPECT_THROW(lease.release(), LockLostError);
    ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready) << "the waiter was not handed the key";
    auto next = waiting.get();
    ASSERT_TRUE(next);
    EXPECT_LT(ms(Clock::now() - start), 2000);
    EXPECT_GT(next.lease().token(), lease.token());
  }
}

// The subscriber connection comes back after a restart: a holder evicted afterwards still learns
// within about a second, not at its next renewal (10 s here).
TEST_F(Redis, EvictionNoticesResumeAfterARestart) {
  test::RedisServers server(DLOCK_SERVER_SCRIPT, 1);
  const std::string url = server.url(0);
  Client holder = Client::open(url);
  ASSERT_EQ(Raw(url).subscribers(), 1) << "no subscriber once the client is open";
  server.restart(0);
  const auto subscribed = [&] {
    try {
      return Raw(url).subscribers() == 1;
    } catch (const backends::redis::RedisError&) {
      return false;
    }
  };
  ASSERT_TRUE(eventually(subscribed, 10s)) << "the subscriber never came back";
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s, .auto_renew = true});
  std::promise<LossInfo> lost;
  lease.on_lost([&](const LossInfo& info) { lost.set_value(info); });
  const auto start = Clock::now();
  ASSERT_FALSE(Client::open(url).force_release(k).empty());
  auto loss = lost.get_future();
  ASSERT_EQ(loss.wait_for(5s), std::future_status::ready) << "the evicted holder was not told";
  EXPECT_LT(ms(Clock::now() - start), 1500);
}

// A waiter killed with -9 leaves an entry nobody refreshes: the server passes it over once
// it is older than the entry's lifetime (3 s), and the next waiter gets the key at the release.
TEST_F(Redis, WaiterKilledWithSigkillDoesNotBlockTheKey) {
  Client holder = Client::open(url_);
  Client waiter = Client::open(url_);
  Raw raw(url_);
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s});
  test::ChildProcess child({"/proc/self/exe", "--wait", url_, k, "30000"});
  ASSERT_TRUE(eventually([&] { return raw.queued(k) == 1; }, 10s)) << "the child never queued";
  child.kill(SIGKILL);
  child.wait();
  auto waiting = queue_waiter(waiter, k, raw, 1);
  std::this_thread::sleep_for(3500ms);  // the dead entry's lifetime
  const auto start = Clock::now();
  lease.release();
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready);
  auto attempt = waiting.get();
  ASSERT_TRUE(attempt) << "the live waiter did not get the key";
  EXPECT_LT(ms(Clock::now() - start), 1000) << "ms: the key went to the dead waiter first";
  EXPECT_EQ(raw.queued(k), 0) << "the dead entry is still queued";
}

// A waiter killed just before the release may be handed the key: it is then held for that
// waiter's TTL (as if it had died holding it), and the next waiter gets it when that runs out.
TEST_F(Redis, KeyHandedToAFreshlyKilledWaiterRunsOutWithItsTtl) {
  Client holder = Client::open(url_);
  Client waiter = Client::open(url_);
  Raw raw(url_);
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s});
  test::ChildProcess child({"/proc/self/exe", "--wait", url_, k, "1000"});
  ASSERT_TRUE(eventually([&] { return raw.queued(k) == 1; }, 10s)) << "the child never queued";
  child.kill(SIGKILL);
  child.wait();
  auto waiting = queue_waiter(waiter, k, raw, 1);
  const auto start = Clock::now();
  lease.release();
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  ASSERT_TRUE(waiting.get()) << "the live waiter did not get the key";
  // The dead waiter's 1 s lease, then at most one heartbeat (1 s) to notice it.
  EXPECT_GE(ms(Clock::now() - start), 900);
  EXPECT_LT(ms(Clock::now() - start), 4000);
}

// fair=true: waiters get the key in the order they came, and a newcomer never takes a key
// whose lease ran out while someone waits.
TEST_F(Redis, FairModeHandsTheKeyOverInFifoOrder) {
  const std::string url = with_option(url_, "fair=true");
  Client holder = Client::open(url);
  Raw raw(url_);
  const std::string k = key();
  constexpr int kWaiters = 6;
  Lease lease = holder.acquire(k, {.ttl = 30s});
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      try {
        Client client = Client::open(url);
        auto attempt = client.try_acquire_for(k, 30s, {.ttl = 10s});
        if (!attempt) return;
        {
          std::lock_guard lock(mutex);
          order.push_back(i);
        }
        std::this_thread::sleep_for(5ms);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
    ASSERT_TRUE(eventually([&] { return raw.queued(k) == i + 1; }, 5s)) << "waiter " << i << " never queued";
  }
  lease.release();
  for (auto& thread : threads) thread.join();
  std::vector<int> expected(kWaiters);
  for (int i = 0; i < kWaiters; ++i) expected[i] = i;
  EXPECT_EQ(order, expected);

  // No barging after an expiry: the queued waiter gets the key, not the newcomer. The lease is
  // cut short after the waiter went to sleep, so the waiter is still asleep when it runs out.
  Client newcomer = Client::open(url);
  Lease cut_short = holder.acquire(k, {.ttl = 30s});
  Client queued = Client::open(url);
  auto waiting = std::async(std::launch::async, [&] {
    return queued.try_acquire_for(k, 10s, {.ttl = 10s, .owner = "queued-" + run_});
  });
  ASSERT_TRUE(eventually([&] { return raw.queued(k) == 1; }, 5s));
  cut_short.renew(100ms);
  cut_short.detach();
  std::this_thread::sleep_for(200ms);
  auto attempt = newcomer.try_acquire(k);
  EXPECT_FALSE(attempt) << "a newcomer barged in ahead of the queue";
  if (const auto named = sole_holder(attempt.holders())) {
    EXPECT_EQ(named->owner, "queued-" + run_);
  }
  EXPECT_TRUE(waiting.get()) << "the queued waiter did not get the key";
}

// fair=true with shared holds: readers queued before a waiting writer are passed over while its
// claim lives (backend.hpp: it refuses new shared holders), and once the writer leaves, every
// queued reader, before it and after it, gets the key at once.
TEST_F(Redis, FairModeServesAWaitingWriterThenTheQueuedReadersTogether) {
  const std::string url = with_option(url_, "fair=true");
  Client holder = Client::open(url);
  Raw raw(url_);
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s});
  const std::vector<LockMode> modes = {LockMode::shared, LockMode::shared, LockMode::exclusive, LockMode::shared};
  std::atomic<int> readers_in{0}, readers_entered{0}, most{0}, before_writer{-1};
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < modes.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        Client client = Client::open(url);
        auto attempt = client.try_acquire_for(k, 30s, {.ttl = 10s, .mode = modes[i]});
        if (!attempt) return ADD_FAILURE() << "waiter " << i << " never got the key";
        if (modes[i] == LockMode::exclusive) {
          before_writer = readers_entered.load();
          std::this_thread::sleep_for(100ms);
        } else {
          ++readers_entered;
          const int now = ++readers_in;
          int seen = most.load();
          while (seen < now && !most.compare_exchange_weak(seen, now)) {
          }
          eventually([&] { return most.load() == 3; }, 5s);
          --readers_in;
        }
        attempt.lease().release();
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
    ASSERT_TRUE(eventually([&] { return raw.queued(k) == static_cast<long long>(i) + 1; }, 5s))
        << "waiter " << i << " never queued";
  }
  lease.release();
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(before_writer.load(), 0) << "readers went before the waiting writer's claim";
  EXPECT_EQ(most.load(), 3) << "the queued readers did not hold the key together";
}

// 64 waiters on one key: each gets it exactly once, never two at a time, tokens rising in the
// order of the acquisitions.
TEST_F(Redis, SixtyFourWaitersEachGetTheKeyOnce) {
  constexpr int kWaiters = 64;
  Client client = Client::open(url_);
  const std::string k = key();
  Lease lease = client.acquire(k, {.ttl = 30s});
  std::atomic<int> inside{0}, overlaps{0};
  std::mutex mutex;
  std::vector<std::uint64_t> tokens;
  std::vector<int> acquired(kWaiters, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      try {
        auto attempt = client.try_acquire_for(k, 60s, {.ttl = 30s});
        if (!attempt) return;
        if (inside.fetch_add(1) != 0) ++overlaps;
        {
          std::lock_guard lock(mutex);
          tokens.push_back(attempt.lease().token());
          ++acquired[i];
        }
        inside.fetch_sub(1);
        attempt.lease().release();
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
  }
  Raw raw(url_);
  EXPECT_TRUE(eventually([&] { return raw.queued(k) == kWaiters; }, 20s)) << raw.queued(k) << " queued";
  const auto start = Clock::now();
  lease.release();
  for (auto& thread : threads) thread.join();
  std::fprintf(stderr, "64 handoffs took %lld ms\n", ms(Clock::now() - start));
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(acquired, std::vector<int>(kWaiters, 1));
  EXPECT_TRUE(std::is_sorted(tokens.begin(), tokens.end()));
  EXPECT_EQ(std::adjacent_find(tokens.begin(), tokens.end()), tokens.end());
  EXPECT_EQ(raw.queued(k), 0);
}

// Backend::acquire_set and release_set, one script each (lua/acquire_set.lua, release_set.lua).
class RedisSet : public Redis {
 protected:
  static std::shared_ptr<backend::Backend> open_backend(const std::string& url) {
    return backends::open_backend(core::Url::parse(url));
  }
  static backend::AcquireRequest request(const std::string& k, const std::string& owner,
                                         std::chrono::milliseconds ttl = 10s) {
    return {k, owner, ttl};
  }
  // The set's leases, or a failure naming the busy key.
  static std::vector<backend::Acquired> granted(const std::optional<backend::AcquireSetResult>& result) {
    EXPECT_TRUE(result) << "redis:// took the set one key at a time";
    if (!result) return {};
    if (const auto* busy = std::get_if<backend::SetBusy>(&*result)) {
      ADD_FAILURE() << "the set was refused at " << busy->index;
      return {};
    }
    return std::get<std::vector<backend::Acquired>>(*result);
  }
  // The one holder a refused set names at its busy key, which must be the `index`-th.
  static std::optional<LockInfo> refused_at(const std::optional<backend::AcquireSetResult>& result, std::size_t index) {
    EXPECT_TRUE(result) << "redis:// took the set one key at a time";
    const auto* busy = result ? std::get_if<backend::SetBusy>(&*result) : nullptr;
    if (!busy) {
      ADD_FAILURE() << "the set was granted";
      return std::nullopt;
    }
    EXPECT_EQ(busy->index, index);
    EXPECT_GT(busy->busy.retry_within.count(), 0);
    return sole_holder(busy->busy.holders);
  }
  static std::string seq(const std::string& k) { return "dlock:{" + k + "}:seq"; }
  static long long indexed(Raw& raw, const std::string& k) {
    return raw.integer({"ZLEXCOUNT", "dlock:held", "[" + k, "[" + k});
  }
  const std::string me_ = "set-owner", other_ = "other-owner";
};

// A set whose second key is held takes nothing: no key before or after it is held, indexed or
// given a token, fair or not.
TEST_F(RedisSet, OneKeyBusyChangesNoneOfTheOthers) {
  for (const std::string& url : {url_, with_option(url_, "fair=true")}) {
    SCOPED_TRACE(url);
    auto backend = open_backend(url);
    Raw raw(url_);
    const std::string mode = url == url_ ? "plain/" : "fair/";
    const std::string a = key(mode + "a"), b = key(mode + "b"), c = key(mode + "c");
    const auto earlier = std::get<backend::Acquired>(backend->acquire(request(a, me_)));
    ASSERT_EQ(backend->release({a, me_, earlier.token}), 0u);
    const auto blocker = std::get<backend::Acquired>(backend->acquire(request(b, other_)));
    const std::vector set{request(a, me_), request(b, me_), request(c, me_)};
    const auto holder = refused_at(backend->acquire_set(set), 1);
    ASSERT_TRUE(holder);
    EXPECT_EQ(holder->owner, other_);
    EXPECT_EQ(holder->token, blocker.token);
    EXPECT_EQ(raw.text({"GET", seq(a)}), std::to_string(earlier.token)) << "a token was drawn for the key before";
    EXPECT_EQ(raw.integer({"EXISTS", seq(c)}), 0) << "a token was drawn for the key after";
    for (const auto& k : {a, c}) {
      EXPECT_TRUE(backend->inspect(k).empty()) << k;
      EXPECT_EQ(indexed(raw, k), 0) << k;
    }
  }
}

// Each key of a set draws from its own counter: above its earlier tokens, whether a set or a
// single acquisition took it last.
TEST_F(RedisSet, TokensRisePerKey) {
  auto backend = open_backend(url_);
  Raw raw(url_);
  const std::string a = key("a"), b = key("b");
  const std::vector set{request(a, me_), request(b, me_)};
  const auto first = granted(backend->acquire_set(set));
  ASSERT_EQ(first.size(), 2u);
  for (std::size_t i = 0; i < set.size(); ++i) {
    EXPECT_EQ(first[i].hold_count, 1u);
    EXPECT_EQ(raw.text({"GET", seq(std::string(set[i].key))}), std::to_string(first[i].token)) << set[i].key;
  }
  const std::vector<backend::LeaseRef> refs{{a, me_, first[0].token}, {b, me_, first[1].token}};
  ASSERT_EQ(backend->release_set(refs), (std::vector<std::optional<std::uint32_t>>{0u, 0u}));
  const auto single = std::get<backend::Acquired>(backend->acquire(request(a, other_)));
  EXPECT_GT(single.token, first[0].token);
  ASSERT_EQ(backend->release({a, other_, single.token}), 0u);
  const auto second = granted(backend->acquire_set(set));
  ASSERT_EQ(second.size(), 2u);
  EXPECT_GT(second[0].token, single.token);
  EXPECT_GT(second[1].token, first[1].token);
  EXPECT_EQ(backend->release_set({{{a, me_, second[0].token}, {b, me_, second[1].token}}}),
            (std::vector<std::optional<std::uint32_t>>{0u, 0u}));
}

// A set re-enters a key its owner holds: same token, one more hold, the lease never shortened;
// its release_set drops that one hold. An evicted holder's set is no re-entry.
TEST_F(RedisSet, AReEntryInsideASet) {
  auto backend = open_backend(url_);
  Raw raw(url_);
  const std::string a = key("a"), b = key("b");
  const auto held = std::get<backend::Acquired>(backend->acquire(request(a, me_, 60s)));
  const auto set = granted(backend->acquire_set(std::vector{request(a, me_), request(b, me_)}));
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(set[0].token, held.token);
  EXPECT_EQ(set[0].hold_count, 2u);
  EXPECT_EQ(set[1].hold_count, 1u);
  EXPECT_GT(raw.integer({"PTTL", "dlock:{" + a + "}"}), 10'000) << "the set's 10 s shortened a 60 s lease";
  EXPECT_EQ(backend->release_set({{{a, me_, set[0].token}, {b, me_, set[1].token}}}),
            (std::vector<std::optional<std::uint32_t>>{1u, 0u}));
  const auto holder = sole_holder(backend->inspect(a));
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->hold_count, 1u);

  ASSERT_FALSE(backend->force_release(a, Eviction::delayed, std::nullopt).empty());
  const auto evicted = refused_at(backend->acquire_set(std::vector{request(a, me_), request(b, me_)}), 0);
  ASSERT_TRUE(evicted) << "an evicted holder re-entered inside a set";
  EXPECT_TRUE(evicted->evicted);
  EXPECT_TRUE(backend->inspect(b).empty());
  EXPECT_EQ(backend->release({a, me_, held.token}), std::nullopt);
}

// release_set of a set where one key was force-released with a lock delay and one at once:
// those two answer that the lease was no longer ours, the delayed one's hold ends, and every
// key is free afterwards.
TEST_F(RedisSet, ReleaseOfASetWithKeysForceReleased) {
  auto backend = open_backend(url_);
  const std::string a = key("a"), b = key("b"), c = key("c");
  const auto set = granted(backend->acquire_set(std::vector{request(a, me_), request(b, me_), request(c, me_)}));
  ASSERT_EQ(set.size(), 3u);
  ASSERT_FALSE(backend->force_release(b, Eviction::delayed, std::nullopt).empty());
  ASSERT_FALSE(backend->force_release(c, Eviction::immediate, std::nullopt).empty());
  EXPECT_EQ(backend->release_set({{{a, me_, set[0].token}, {b, me_, set[1].token}, {c, me_, set[2].token}}}),
            (std::vector<std::optional<std::uint32_t>>{0u, std::nullopt, std::nullopt}));
  for (const auto& k : {a, b, c}) EXPECT_TRUE(backend->inspect(k).empty()) << k;
}

// release_set serves each freed key's queue in the same script: the first waiter holds the key
// when the release answers.
TEST_F(RedisSet, ReleaseHandsEachFreedKeyToItsFirstWaiter) {
  auto backend = open_backend(url_);
  Client waiter = Client::open(url_);
  Raw raw(url_);
  const std::string a = key("a"), b = key("b");
  const auto set = granted(backend->acquire_set(std::vector{request(a, me_, 30s), request(b, me_, 30s)}));
  ASSERT_EQ(set.size(), 2u);
  auto waiting = queue_waiter(waiter, b, raw);
  EXPECT_EQ(backend->release_set({{{a, me_, set[0].token}, {b, me_, set[1].token}}}),
            (std::vector<std::optional<std::uint32_t>>{0u, 0u}));
  const auto holder = sole_holder(backend->inspect(b));
  ASSERT_TRUE(holder) << "the freed key was not handed to its waiter";
  EXPECT_NE(holder->owner, me_);
  ASSERT_EQ(waiting.wait_for(20s), std::future_status::ready);
  auto attempt = waiting.get();
  ASSERT_TRUE(attempt);
  EXPECT_EQ(attempt.lease().token(), holder->token);
}

// The child of the -9 cases: waits for KEY and holds it; it is killed while it waits.
int waiter_main(const std::string& url, const std::string& key, long ttl_ms) {
  Client client = Client::open(url);
  auto attempt = client.try_acquire_for(key, 60s, {.ttl = std::chrono::milliseconds(ttl_ms)});
  std::this_thread::sleep_for(60s);
  return attempt ? 0 : 1;
}

}  // namespace
}  // namespace dlock

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--wait") return dlock::waiter_main(argv[2], argv[3], std::atol(argv[4]));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
