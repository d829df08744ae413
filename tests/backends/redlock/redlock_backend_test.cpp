// redlock:// on private Redis servers of each test (3 or 5, scripts/servers/redis.sh), through
// the public API: a minority of servers killed (locks keep working, the holder keeps its
// lease), a majority killed (a clean, prompt failure, and recovery once they return), a hung
// server (one timeout, then left out), fencing tokens when the servers' counters differ, the
// servers a semaphore needs, a set of keys granted by a minority, the readers' claim on every
// server, waking the readers a writer's claim held back, a reader's grant that kept another's
// token given back, and credentials. The conformance suite runs on redlock:// too
// (DLOCK_TEST_URLS).
//
// Every case skips without DLOCK_REDIS_URL (scripts/test.sh sets it when it runs Redis).

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "backends/redis/connection.hpp"
#include "backends/registry.hpp"
#include "core/url.hpp"
#include "dlock/client.hpp"
#include "dlock/errors.hpp"
#include "dlock/shared_lock.hpp"
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

// One command on one server, for what dlock never does itself.
std::string raw(const std::string& url, const std::vector<std::string_view>& command) {
  const auto parsed = core::Url::parse(url);
  core::UrlOptions options(parsed);
  const auto endpoint = backends::redis::parse_endpoint(parsed, options);
  backends::redis::Connection connection(endpoint);
  return backends::redis::text(connection.command(command).get());
}

class Redlock : public ::testing::Test {
 protected:
  void start(int servers) {
    if (!env("DLOCK_REDIS_URL")) GTEST_SKIP() << "DLOCK_REDIS_URL is not set: Redis is not part of this run";
    servers_ = std::make_unique<test::RedisServers>(DLOCK_SERVER_SCRIPT, servers);
    url_ = servers_->env("DLOCK_REDLOCK_URL");
  }
  std::string key(const std::string& name = "k") const {
    return "redlock-test/" + run_ + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/" + name;
  }

  std::unique_ptr<test::RedisServers> servers_;
  std::string url_;
  std::string run_ = random_hex(8);
};

// With one of three servers killed, a holder keeps renewing its lease, others see it held,
// and new locks are taken, released and handed to waiters as before.
TEST_F(Redlock, OneOfThreeKilledLocksKeepWorking) {
  start(3);
  if (IsSkipped()) return;
  Client holder = Client::open(url_);
  Client other = Client::open(url_);
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 900ms, .auto_renew = true});
  servers_->kill(0);
  std::this_thread::sleep_for(2500ms);  // several renewals, each now answered by two servers
  EXPECT_TRUE(lease.held()) << "the holder lost its lock with a majority still up";
  auto attempt = other.try_acquire(k);
  ASSERT_FALSE(attempt) << "two owners with two servers of three up";
  const auto named = sole_holder(attempt.holders());
  ASSERT_TRUE(named);
  EXPECT_EQ(named->owner, lease.owner());

  auto waiting = std::async(std::launch::async, [&] { return other.try_acquire_for(k, 10s, {.ttl = 10s}); });
  std::this_thread::sleep_for(200ms);
  const auto released = Clock::now();
  EXPECT_NO_THROW(lease.release());
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready);
  auto taken = waiting.get();
  ASSERT_TRUE(taken) << "the waiter did not get the key";
  EXPECT_LT(ms(Clock::now() - released), 1000) << "ms: the waiter was not woken by the release";
  EXPECT_GT(taken.lease().token(), lease.token());
  taken.lease().release();

  // The killed server back, empty: locks use all three again, and tokens keep rising.
  servers_->restart(0);
  const std::uint64_t before = taken.lease().token();
  EXPECT_TRUE(eventually([&] { return !raw(servers_->url(0), {"PING"}).empty(); }, 5s));
  std::this_thread::sleep_for(1100ms);  // past the time a failed server is left out
  Lease again = holder.acquire(k, {.ttl = 10s});
  EXPECT_GT(again.token(), before);
  EXPECT_FALSE(raw(servers_->url(0), {"GET", "dlock:{" + k + "}"}).empty()) << "the restarted server was not used";
}

// With two of three servers killed, the holder learns of the loss once its lease cannot be
// trusted, and every call fails at once with an error naming the cause; once the servers are
// back, locks work again.
TEST_F(Redlock, TwoOfThreeKilledIsACleanFailure) {
  start(3);
  if (IsSkipped()) return;
  Client holder = Client::open(url_);
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 1s, .auto_renew = true});
  const std::uint64_t token = lease.token();
  std::promise<LossInfo> lost;
  lease.on_lost([&](const LossInfo& info) { lost.set_value(info); });
  servers_->kill(0);
  servers_->kill(1);
  auto loss = lost.get_future();
  ASSERT_EQ(loss.wait_for(5s), std::future_status::ready) << "the holder was not told";
  EXPECT_EQ(loss.get().reason, LossReason::renewal_failed);

  const auto start = Clock::now();
  try {
    holder.try_acquire(key("other"));
    FAIL() << "an acquisition succeeded with one server of three";
  } catch (const ConnectionError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(e.retryable());
    EXPECT_NE(message.find("majority"), std::string::npos) << message;
    EXPECT_NE(message.find("1 of 3"), std::string::npos) << message;
    EXPECT_EQ(message.find("dlock-test-pw"), std::string::npos) << message;
  }
  EXPECT_LT(ms(Clock::now() - start), 1000) << "ms to fail";
  EXPECT_THROW(Client::open(url_), ConnectionError);

  servers_->restart(0);
  servers_->restart(1);
  std::unique_ptr<Lease> again;
  EXPECT_TRUE(eventually(
      [&] {
        try {
          auto attempt = holder.try_acquire(k);
          if (attempt) again = std::make_unique<Lease>(std::move(attempt.lease()));
          return attempt.acquired();
        } catch (const ConnectionError&) {
          return false;
        }
      },
      10s))
      << "no recovery after the servers came back";
  if (again) {
    EXPECT_GT(again->token(), token);
  }
}

// A force-release with a lock delay reaches a majority with one server down: the holder is
// evicted (told at once by the servers still up), nobody else gets the key until the holder's
// release, which opens it.
TEST_F(Redlock, LockDelayWithOneOfThreeKilled) {
  start(3);
  if (IsSkipped()) return;
  Client holder = Client::open(url_);
  Client admin = Client::open(url_);
  const std::string k = key();
  Lease lease = holder.acquire(k, {.ttl = 30s, .auto_renew = true});
  std::promise<LossInfo> lost;
  lease.on_lost([&](const LossInfo& info) { lost.set_value(info); });
  servers_->kill(0);
  const auto forced = Clock::now();
  const auto released = sole_holder(admin.force_release(k));
  ASSERT_TRUE(released);
  EXPECT_EQ(released->token, lease.token());
  auto loss = lost.get_future();
  ASSERT_EQ(loss.wait_for(5s), std::future_status::ready) << "the evicted holder was not told";
  EXPECT_LT(ms(Clock::now() - forced), 1500) << "ms from the force-release to the holder's loss";
  EXPECT_EQ(loss.get().reason, LossReason::not_owner);
  const auto evicted = sole_holder(admin.inspect(k));
  ASSERT_TRUE(evicted);
  EXPECT_TRUE(evicted->evicted);
  EXPECT_EQ(evicted->hold_count, 0u);
  EXPECT_FALSE(admin.try_acquire(k)) << "taken under the lock delay";
  EXPECT_THROW(lease.release(), LockLostError);
  auto next = admin.try_acquire(k);
  ASSERT_TRUE(next) << "the evicted holder's release did not open the key";
  EXPECT_GT(next.lease().token(), lease.token());
}

// Five servers: two down still make a majority of three; a third down does not.
TEST_F(Redlock, FiveServersOutliveTwoKilledButNotThree) {
  start(5);
  if (IsSkipped()) return;
  Client client = Client::open(url_);
  Client other = Client::open(url_);
  servers_->kill(1);
  servers_->kill(3);
  const std::string k = key();
  {
    Lease lease = client.acquire(k, {.ttl = 10s});
    EXPECT_FALSE(other.try_acquire(k));
    lease.release();
  }
  EXPECT_TRUE(other.try_acquire(k)) << "the key was not free after the release";
  servers_->kill(4);
  EXPECT_THROW(client.try_acquire(key("more")), ConnectionError);
}

// A server that accepts connections but answers nothing costs one command timeout, after
// which rounds leave it out; it is used again once it answers.
TEST_F(Redlock, HungServerCostsOneTimeoutThenIsLeftOut) {
  start(3);
  if (IsSkipped()) return;
  Client client = Client::open(with_option(url_, "command_timeout=200ms"));
  const std::string k = key();
  client.acquire(k, {.ttl = 10s}).release();  // connections open before the server hangs
  servers_->pause(2);
  struct Resume {
    test::RedisServers& servers;
    ~Resume() { servers.resume(2); }
  } resume{*servers_};
  auto start = Clock::now();
  {
    Lease lease = client.acquire(k, {.ttl = 10s});
    lease.release();
  }
  const auto first = ms(Clock::now() - start);
  EXPECT_GE(first, 150) << "ms: the hung server was not waited for";
  EXPECT_LT(first, 2000) << "ms";
  start = Clock::now();
  client.acquire(k, {.ttl = 10s}).release();
  EXPECT_LT(ms(Clock::now() - start), 150) << "ms: the hung server was waited for again";
}

// The servers' counters differ (one ran ahead): the acquisition takes the highest token and
// raises the others to it, so a majority without that server still draws above it.
TEST_F(Redlock, FencingTokensRiseWhenTheServersCountersDiffer) {
  start(3);
  if (IsSkipped()) return;
  Client client = Client::open(url_);
  const std::string k = key();
  const std::string seq = "dlock:{" + k + "}:seq";
  const std::uint64_t first = client.acquire(k, {.ttl = 10s}).token();
  const std::string ahead = std::to_string(first + 1'000'000);
  raw(servers_->url(0), {"SET", seq, ahead});
  Lease lease = client.acquire(k, {.ttl = 10s});
  const std::uint64_t second = lease.token();
  EXPECT_EQ(second, first + 1'000'001) << "not the highest token drawn";
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(raw(servers_->url(i), {"GET", seq}), std::to_string(second)) << "server " << i;
    EXPECT_EQ(raw(servers_->url(i), {"GET", "dlock:{" + k + "}"}).rfind(std::to_string(second) + " 1 ", 0), 0u)
        << "server " << i << " holds another token";
  }
  lease.release();
  servers_->kill(0);
  EXPECT_GT(client.acquire(k, {.ttl = 10s}).token(), second) << "a majority without server 0 went back";
}

// A set is all or none on each server and across them: granted by one server of three while the
// other two find its second key held, it is given back there. Once free, it holds on every
// server, each key under one token.
TEST_F(Redlock, ASetGrantedByAMinorityIsGivenBack) {
  start(3);
  if (IsSkipped()) return;
  auto backend = backends::open_backend(core::Url::parse(url_));
  const std::string a = key("a"), b = key("b");
  const auto lock = [](const std::string& k) { return "dlock:{" + k + "}"; };
  for (int i = 0; i < 2; ++i) raw(servers_->url(i), {"SET", lock(b), "7 1 0 someone", "PX", "30000"});
  const std::vector<backend::AcquireRequest> set{{a, "me", 10s}, {b, "me", 10s}};
  const auto refused = backend->acquire_set(set);
  ASSERT_TRUE(refused) << "redlock:// took the set one key at a time";
  const auto* busy = std::get_if<backend::SetBusy>(&*refused);
  ASSERT_NE(busy, nullptr) << "a set held on a majority was granted";
  EXPECT_EQ(busy->index, 1u);
  const auto holder = sole_holder(busy->busy.holders);
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->owner, "someone");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(raw(servers_->url(i), {"EXISTS", lock(a)}), "0") << "server " << i;
  EXPECT_EQ(raw(servers_->url(2), {"EXISTS", lock(b)}), "0") << "the minority's grant was kept";

  for (int i = 0; i < 2; ++i) raw(servers_->url(i), {"DEL", lock(b)});
  const auto result = backend->acquire_set(set);
  ASSERT_TRUE(result && std::holds_alternative<std::vector<backend::Acquired>>(*result)) << "a free set was refused";
  const auto& tokens = std::get<std::vector<backend::Acquired>>(*result);
  ASSERT_EQ(tokens.size(), 2u);
  const std::vector<backend::LeaseRef> refs{{a, "me", tokens[0].token}, {b, "me", tokens[1].token}};
  for (const auto& ref : refs) {
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(raw(servers_->url(i), {"GET", lock(std::string(ref.key))}).rfind(std::to_string(ref.token) + " 1 ", 0), 0u)
          << "server " << i << " holds " << ref.key << " under another token";
    }
  }
  EXPECT_EQ(backend->release_set(refs), (std::vector<std::optional<std::uint32_t>>{0u, 0u}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(raw(servers_->url(i), {"EXISTS", lock(a), lock(b)}), "0") << "server " << i;
}

// Three holders of a semaphore of 2 could each hold a different pair of 3 servers, every
// server admitting 2 of them: so a semaphore of 2 takes every server's grant, while readers and
// a semaphore of 1 need a majority, as writers do.
TEST_F(Redlock, ASemaphoreOfTwoTakesEveryServerOfThree) {
  start(3);
  if (IsSkipped()) return;
  Client client = Client::open(url_);
  const std::string k = key();
  const std::string shared = "dlock:{" + k + "}:sh";
  // x holds servers 0 and 1, y servers 1 and 2: server 1 is full, 0 and 2 have a permit left.
  const std::string x = "9999999999999 1 0 2 x", y = "9999999999999 1 0 2 y";
  raw(servers_->url(0), {"HSET", shared, "1", x});
  raw(servers_->url(1), {"HSET", shared, "1", x, "2", y});
  raw(servers_->url(2), {"HSET", shared, "2", y});
  for (int i = 0; i < 3; ++i) raw(servers_->url(i), {"SET", "dlock:{" + k + "}:seq", "2"});
  auto third = client.semaphore(k, 2);
  EXPECT_FALSE(third.try_acquire()) << "a third holder of a semaphore of 2, on servers 0 and 2";
  for (int i = 0; i < 3; ++i) raw(servers_->url(i), {"DEL", shared});

  servers_->kill(0);
  Lease reader = client.acquire(k, {.mode = LockMode::shared});
  reader.release();
  auto one = client.semaphore(k, 1);
  ASSERT_TRUE(one.try_acquire()) << "a semaphore of 1 needs a majority only";
  one.release();
  try {
    third.try_acquire();
    FAIL() << "a semaphore of 2 held with one of three servers down";
  } catch (const ConnectionError& e) {
    EXPECT_NE(std::string(e.what()).find("2 of 3 servers answered, and it takes 3"), std::string::npos) << e.what();
  }
}

// The redis key of the readers' claim on `key` (src/backends/redis/lua/common.lua).
std::string readers_claim(const std::string& key) { return "dlock:{" + key + "}:rc"; }

// The readers' claim (backend.hpp, "Nor are readers"), kept on each server: a waiting reader
// that a writer refused places it on every server, on the writer's token; a new writer, alone
// or in a set, is then refused on the free key, a reader that waited behind the writer passes
// the waiting writer's claim, and its grant ends the readers' claim everywhere.
TEST_F(Redlock, AWaitingReaderClaimsTheKeyFromWritersOnEveryServerUntilTheNextGrant) {
  start(3);
  if (IsSkipped()) return;
  auto backend = backends::open_backend(core::Url::parse(url_));
  const std::string k = key();
  const std::string claim = readers_claim(k);
  const auto writer = std::get<backend::Acquired>(backend->acquire({k, "w", 10s}));
  const backend::AcquireRequest reader{k, "r", 10s, LockMode::shared, 0, /*waiting=*/true};
  ASSERT_TRUE(std::holds_alternative<backend::Busy>(backend->acquire({k, "r", 10s, LockMode::shared})));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(raw(servers_->url(i), {"EXISTS", claim}), "0") << "a try-once reader claimed";
  const auto refused = backend->acquire(reader);
  ASSERT_TRUE(std::holds_alternative<backend::Busy>(refused));
  EXPECT_EQ(backend::waited_behind(LockMode::shared, refused), writer.token);
  EXPECT_LE(std::get<backend::Busy>(refused).retry_within, backend::kWriterClaim / 2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(raw(servers_->url(i), {"GET", claim}), std::to_string(writer.token)) << i;
  ASSERT_EQ(backend->release({k, "w", writer.token}), 0u);

  const auto expect_claimed = [](const backend::AcquireResult& result) {
    const auto* busy = std::get_if<backend::Busy>(&result);
    ASSERT_TRUE(busy) << "a writer took a key that readers claimed";
    EXPECT_TRUE(busy->holders.empty());
    EXPECT_GT(busy->retry_within, 0ms);
    EXPECT_LE(busy->retry_within, backend::kWriterClaim);
  };
  expect_claimed(backend->acquire({k, "w", 10s}));
  const std::string other = key("a");
  const std::vector<backend::AcquireRequest> set{{other, "w", 10s}, {k, "w", 10s}};
  const auto set_result = backend->acquire_set(set);
  ASSERT_TRUE(set_result && std::holds_alternative<backend::SetBusy>(*set_result)) << "a set took a claimed key";
  EXPECT_EQ(std::get<backend::SetBusy>(*set_result).index, 1u);
  // A waiting writer so refused places its own claim, which the reader behind the writer passes.
  expect_claimed(backend->acquire({k, "w", 10s, LockMode::exclusive, 0, /*waiting=*/true}));
  EXPECT_TRUE(std::holds_alternative<backend::Busy>(backend->acquire({k, "late", 10s, LockMode::shared, 0, true})))
      << "a reader that did not wait behind the writer passed its claim";
  auto behind = reader;
  behind.waited_behind = writer.token;
  const auto granted = backend->acquire(behind);
  ASSERT_TRUE(std::holds_alternative<backend::Acquired>(granted));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(raw(servers_->url(i), {"EXISTS", claim}), "0") << "server " << i;
  ASSERT_EQ(backend->release({k, "r", std::get<backend::Acquired>(granted).token}), 0u);
  EXPECT_TRUE(std::holds_alternative<backend::Acquired>(backend->acquire({k, "w", 10s})));
}

// A writer's grant that ends a writer's claim which refused waiting readers wakes every waiter
// (backend.hpp, "Shared holds"), so they find the writer and wait behind it; one that ends a
// claim no reader met (writers waiting behind a writer) wakes none beyond the release's one.
TEST_F(Redlock, AWritersGrantWakesEveryReaderItsClaimHeldBack) {
  start(3);
  if (IsSkipped()) return;
  auto backend = backends::open_backend(core::Url::parse(url_));
  for (const bool readers : {true, false}) {
    const std::string k = key(readers ? "readers" : "writers");
    const std::string bell = "dlock:{" + k + "}:bell";
    const LockMode mode = readers ? LockMode::shared : LockMode::exclusive;
    const auto holder = std::get<backend::Acquired>(backend->acquire({k, "h", 10s, mode}));
    const backend::AcquireRequest writer{k, "w", 10s, LockMode::exclusive, 0, /*waiting=*/true};
    ASSERT_TRUE(std::holds_alternative<backend::Busy>(backend->acquire(writer)));
    std::vector<std::unique_ptr<backend::Waiter>> waiters;
    for (const std::string owner : {"a", "b", "c"}) {
      waiters.push_back(backend->waiter({k, owner, 10s, mode, 0, /*waiting=*/true}));
      ASSERT_TRUE(std::holds_alternative<backend::Busy>(waiters.back()->attempt())) << owner;
    }
    ASSERT_EQ(backend->release({k, "h", holder.token}), 0u);
    EXPECT_EQ(raw(servers_->url(0), {"LLEN", bell}), "1") << "a release rings one waiter";
    ASSERT_TRUE(std::holds_alternative<backend::Acquired>(backend->acquire(writer)));
    EXPECT_EQ(raw(servers_->url(0), {"LLEN", bell}), readers ? "3" : "1") << (readers ? "readers" : "writers");
  }
}

// Concurrent readers may draw one another's tokens on different servers: an acquisition that
// holds without a server where its token is another reader's gives its grant there back, since
// no renewal or release of it would reach that grant, which would refuse writers there.
TEST_F(Redlock, AReaderGivesBackAGrantThatKeptAnotherToken) {
  start(3);
  if (IsSkipped()) return;
  auto backend = backends::open_backend(core::Url::parse(url_));
  const std::string k = key();
  const std::string shared = "dlock:{" + k + "}:sh";
  // Server 0 draws 101 and has another reader under 105, which servers 1 and 2 draw.
  raw(servers_->url(0), {"SET", "dlock:{" + k + "}:seq", "100"});
  raw(servers_->url(0), {"HSET", shared, "105", "9999999999999 1 0 0 other"});
  for (int i = 1; i < 3; ++i) raw(servers_->url(i), {"SET", "dlock:{" + k + "}:seq", "104"});
  const auto reader = backend->acquire({k, "me", 10s, LockMode::shared});
  ASSERT_TRUE(std::holds_alternative<backend::Acquired>(reader));
  EXPECT_EQ(std::get<backend::Acquired>(reader).token, 105u);
  EXPECT_EQ(raw(servers_->url(0), {"HEXISTS", shared, "101"}), "0") << "the grant under 101 was left on server 0";
  EXPECT_EQ(raw(servers_->url(0), {"HEXISTS", shared, "105"}), "1");
}

// A readers' claim left on a minority of servers (placed on a writer's partial grant there, or
// not reached by the readers' grant) ends with the key's next acquisition: it would refuse
// writers on that server while they hold the key elsewhere.
TEST_F(Redlock, AnAcquisitionEndsAReadersClaimOnTheServersThatRefusedIt) {
  start(3);
  if (IsSkipped()) return;
  auto backend = backends::open_backend(core::Url::parse(url_));
  const std::string k = key();
  const std::string claim = readers_claim(k);
  raw(servers_->url(0), {"SET", claim, "1", "PX", "30000"});
  const auto writer = backend->acquire({k, "w", 10s});
  ASSERT_TRUE(std::holds_alternative<backend::Acquired>(writer)) << "a claim on one server of three kept a writer out";
  EXPECT_EQ(raw(servers_->url(0), {"EXISTS", claim}), "0");
  EXPECT_EQ(raw(servers_->url(0), {"EXISTS", "dlock:{" + k + "}"}), "0") << "server 0 granted a claimed key";

  // A set, in one round for all its keys.
  const std::string a = key("a"), b = key("b");
  for (const auto& name : {a, b}) raw(servers_->url(0), {"SET", readers_claim(name), "1", "PX", "30000"});
  const std::vector<backend::AcquireRequest> set{{a, "w", 10s}, {b, "w", 10s}};
  const auto taken = backend->acquire_set(set);
  ASSERT_TRUE(taken && std::holds_alternative<std::vector<backend::Acquired>>(*taken));
  EXPECT_EQ(raw(servers_->url(0), {"EXISTS", readers_claim(a), readers_claim(b)}), "0");
}

TEST_F(Redlock, WrongPasswordIsAClearErrorWithoutThePassword) {
  start(3);
  if (IsSkipped()) return;
  const core::Url good = core::Url::parse(url_);
  const std::string bad = "redlock://" + good.user + ":not-the-pw-4711@" + good.host + good.path;
  try {
    Client::open(bad);
    FAIL() << "a wrong password was accepted";
  } catch (const ConfigurationError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find("not-the-pw-4711"), std::string::npos) << message;
    EXPECT_NE(message.find("password"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace dlock
