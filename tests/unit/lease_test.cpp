// Core rules that do not depend on the backend, exercised on local://.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "dlock/client.hpp"

using namespace std::chrono_literals;

namespace {

dlock::Client fresh_client() {
  static int n = 0;
  return dlock::Client::open("local://lease-test-" + std::to_string(++n));
}

}  // namespace

TEST(Lease, MoveTransfersTheHoldAndReleasesOnce) {
  auto client = fresh_client();
  dlock::Lease a = client.acquire("k");
  dlock::Lease b = std::move(a);
  EXPECT_TRUE(b.held());
  EXPECT_FALSE(client.try_acquire("k", {.owner = "other"}));
  b.release();
  b.release();  // second call is a no-op
  EXPECT_TRUE(client.try_acquire("k", {.owner = "other"}));
}

TEST(Lease, DetachKeepsTheLockAndClientReleaseDropsIt) {
  auto client = fresh_client();
  std::uint64_t token = 0;
  {
    dlock::Lease lease = client.acquire("k", {.ttl = 5s, .owner = "script"});
    token = lease.token();
    lease.detach();
  }
  const auto info = client.inspect("k");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->owner, "script");
  EXPECT_THROW(client.release("k", "script", token + 1), dlock::LockLostError);
  EXPECT_EQ(client.release("k", "script", token), 0u);
  EXPECT_FALSE(client.inspect("k"));
}

TEST(Lease, ManualRenewMovesValidUntil) {
  auto client = fresh_client();
  dlock::Lease lease = client.acquire("k", {.ttl = 200ms});
  const auto before = lease.valid_until();
  std::this_thread::sleep_for(20ms);
  lease.renew(1s);
  EXPECT_GT(lease.valid_until(), before + 500ms);
  EXPECT_THROW(lease.renew(0ms), dlock::InvalidArgument);
}

TEST(Lease, ValidUntilIsConservative) {
  auto client = fresh_client();
  const auto before_send = std::chrono::steady_clock::now();
  dlock::Lease lease = client.acquire("k", {.ttl = 10s});
  EXPECT_LE(lease.valid_until(), before_send + 10s - 2ms);
  EXPECT_GT(lease.valid_until(), before_send + 9s);
}

TEST(Lease, AttemptLeaseOnFailureIsALogicError) {
  auto client = fresh_client();
  dlock::Lease held = client.acquire("k");
  auto attempt = client.try_acquire("k", {.owner = "other"});
  EXPECT_FALSE(attempt);
  EXPECT_THROW(attempt.lease(), std::logic_error);
  ASSERT_TRUE(attempt.holder());
  EXPECT_EQ(attempt.holder()->owner, held.owner());
}

TEST(Mutex, ReentryPerThreadAndLeaseAccess) {
  auto client = fresh_client();
  auto m = client.mutex("k");
  std::unique_lock outer(m);
  ASSERT_NE(m.lease(), nullptr);
  const auto token = m.lease()->token();
  {
    std::unique_lock inner(m);
    EXPECT_EQ(m.lease()->token(), token);
    EXPECT_EQ(m.lease()->hold_count(), 2u);
  }
  EXPECT_EQ(m.lease()->token(), token);
  std::thread([&] {
    EXPECT_FALSE(m.try_lock());  // another thread is another owner
    ASSERT_TRUE(m.last_holder());
    EXPECT_EQ(m.last_holder()->hold_count, 1u);
    EXPECT_EQ(m.lease(), nullptr);
  }).join();
}

TEST(Mutex, UnlockWithoutHoldingIsHarmless) {
  auto client = fresh_client();
  auto m = client.mutex("k");
  m.unlock();  // logged, never thrown
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST(Mutex, TryLockUntilAcceptsOtherClocks) {
  auto client = fresh_client();
  auto m = client.mutex("k");
  EXPECT_TRUE(m.try_lock_until(std::chrono::system_clock::now() + 100ms));
  m.unlock();
}

TEST(Client, OwnersAreValidated) {
  auto client = fresh_client();
  EXPECT_THROW(client.acquire("k", {.owner = ""}), dlock::InvalidArgument);
  EXPECT_THROW(client.acquire("k", {.owner = "has space"}), dlock::InvalidArgument);
  EXPECT_THROW(client.acquire("k", {.owner = std::string(200, 'o')}), dlock::InvalidArgument);
  EXPECT_THROW(client.acquire("k", {.ttl = 10ms, .safety_margin = 10ms}), dlock::InvalidArgument);
}

TEST(Client, KeysMustBeText) {
  auto client = fresh_client();
  EXPECT_NO_THROW(client.try_acquire("заказ/42 ✓"));
  EXPECT_THROW(client.try_acquire(std::string("a\xff", 2)), dlock::InvalidArgument);
  EXPECT_THROW(client.try_acquire(std::string("\xc0\xaf", 2)), dlock::InvalidArgument);  // overlong '/'
  EXPECT_THROW(client.try_acquire("tab\there"), dlock::InvalidArgument);
  EXPECT_THROW(client.mutex(""), dlock::InvalidArgument);
}

TEST(Client, DefaultOwnerDiffersPerThreadAndIsStable) {
  auto client = fresh_client();
  const auto mine = client.default_owner();
  EXPECT_EQ(mine, client.default_owner());
  std::string theirs;
  std::thread([&] { theirs = client.default_owner(); }).join();
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(mine.substr(0, 32), client.id());
}

TEST(Client, UnknownSchemeNamesTheBuiltInOnes) {
  try {
    dlock::Client::open("nope://x");
    FAIL();
  } catch (const dlock::ConfigurationError& e) {
    EXPECT_NE(std::string(e.what()).find("local://"), std::string::npos) << e.what();
  }
}

TEST(Client, EmbeddedDefaultFollowsXdgStateHome) {
  ::setenv("XDG_STATE_HOME", "/srv/state", 1);
  EXPECT_EQ(dlock::Client::embedded_default_url(), "sqlite:///srv/state/dlock/locks.db");
  ::unsetenv("XDG_STATE_HOME");
}
