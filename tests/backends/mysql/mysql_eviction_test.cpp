// Force-release with a lock delay (Eviction::delayed) where each mysql:// mode keeps it: the
// row of lease and row mode, and in session mode the row beside the holder's GET_LOCK, which
// must keep the key closed when the holder's connection ends, and must not when its lease ran
// out with the connection still open. What the conformance suite checks for every backend is
// not repeated here.
//
// Needs DLOCK_MYSQL_URL (scripts/servers/mariadb.sh writes it); skips without it. Every case
// uses tables of its own.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <optional>
#include <string>

#include "dlock/client.hpp"
#include "dlock/errors.hpp"
#include "support/holders.hpp"
#include "support/mysql_rows.hpp"
#include "support/server_test.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using test::sole_holder;
using Clock = std::chrono::steady_clock;
using test::eventually;
using test::ms;
using test::with_option;

class MysqlEviction : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto url = test::env("DLOCK_MYSQL_URL");
    if (!url) GTEST_SKIP() << "DLOCK_MYSQL_URL is not set: start a server with scripts/servers/mariadb.sh";
    url_ = *url;
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    table_ = "e_" + name.substr(0, 30) + "_" + std::to_string(::getpid()) + "_" + test::random_hex(8);
  }

  void TearDown() override {
    if (!table_.empty() && !url_.empty()) {
      test::drop_tables(url_,
                        {table_, table_ + "_seq", table_ + "_activity", table_ + "_session", table_ + "_epoch"});
    }
  }

  std::string table_url(const std::string& mode) const {
    return with_option(with_option(url_, "table=" + table_), "mode=" + mode);
  }

  // One column of the key's row in the test's table (session mode: its memory table).
  std::string column(const std::string& name, const std::string& id_column = "name", const std::string& suffix = "") {
    const auto rows =
        test::select_rows(url_, "SELECT " + name + " FROM `" + table_ + suffix + "` WHERE " + id_column + " = 'k'");
    return rows.size() == 1 && rows[0][0] ? *rows[0][0] : "(none)";
  }

  // Sessions of the test's user blocked in GET_LOCK (waiters sleeping on the key's lock).
  int sessions_in_get_lock() {
    const auto rows = test::select_rows(url_,
                                        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE state = 'User lock'"
                                        " AND user = SUBSTRING_INDEX(CURRENT_USER(), '@', 1)");
    return rows.size() == 1 && rows[0][0] ? std::stoi(*rows[0][0]) : -1;
  }

  std::string url_;
  std::string table_;
};

// A holder evicted with a lock delay, whose connection then ends (killed; its process may
// still run): the GET_LOCK is free, yet the key stays closed until the holder's release. One
// waiter keeps the freed GET_LOCK while the other sleeps on it, and the release lets a waiter in.
TEST_F(MysqlEviction, SessionModeKeyStaysClosedWhenTheEvictedHoldersConnectionEnds) {
  const std::string url = table_url("session");
  Client holder = Client::open(url), admin = Client::open(url);
  Client first = Client::open(url), second = Client::open(url);
  Lease lease = holder.acquire("k", {.ttl = 30s});
  auto wait = [&](Client& waiter) {
    return std::async(std::launch::async, [&waiter] { return waiter.try_acquire_for("k", 60s); });
  };
  auto first_waiter = wait(first);
  auto second_waiter = wait(second);
  ASSERT_TRUE(eventually([&] { return sessions_in_get_lock() == 2; }, 10s)) << "the waiters never slept on the lock";

  const auto evicted = sole_holder(admin.force_release("k"));
  ASSERT_TRUE(evicted);
  const std::string session = column("session_id", "name", "_session");
  test::run_statement(url_, "KILL CONNECTION " + session);
  // One waiter is granted the lock and keeps it; the other sleeps on it.
  ASSERT_TRUE(eventually([&] { return sessions_in_get_lock() == 1; }, 10s));
  Attempt meanwhile = admin.try_acquire("k");
  EXPECT_FALSE(meanwhile) << "the key opened when the evicted holder's connection ended";
  const auto named = sole_holder(meanwhile.holders());
  ASSERT_TRUE(named);
  EXPECT_TRUE(named->evicted);
  EXPECT_EQ(named->token, lease.token());
  const auto seen = sole_holder(admin.inspect("k"));
  ASSERT_TRUE(seen);
  EXPECT_TRUE(seen->evicted);
  EXPECT_EQ(admin.list().locks.size(), 1u) << "list lost the evicted holder whose connection ended";
  EXPECT_EQ(first_waiter.wait_for(0s), std::future_status::timeout);
  EXPECT_EQ(second_waiter.wait_for(0s), std::future_status::timeout);

  const auto released = Clock::now();
  EXPECT_THROW(lease.release(), LockLostError);
  const auto ready = [](std::future<Attempt>& f) { return f.wait_for(0s) == std::future_status::ready; };
  ASSERT_TRUE(eventually([&] { return ready(first_waiter) || ready(second_waiter); }, 10s))
      << "no waiter got the key after the release";
  auto& winner = ready(first_waiter) ? first_waiter : second_waiter;
  Attempt next = winner.get();
  ASSERT_TRUE(next);
  std::fprintf(stderr, "a waiter had the key %lld ms after the evicted holder's release\n", ms(Clock::now() - released));
  EXPECT_GT(next.lease().token(), lease.token());
  next.lease().release();
  auto& other = &winner == &first_waiter ? second_waiter : first_waiter;
  ASSERT_EQ(other.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(other.get()) << "the other waiter did not get the key after the first released it";
}

// An evicted holder that neither renews nor releases, its connection open: once its lease is
// over by the server's clock the key opens, as an acquire ends that connection.
TEST_F(MysqlEviction, SessionModeEvictedHolderPastItsLeaseIsEnded) {
  const std::string url = table_url("session");
  Client holder = Client::open(url), admin = Client::open(url);
  Lease lease = holder.acquire("k", {.ttl = 1500ms});
  const auto evicted = sole_holder(admin.force_release("k"));
  ASSERT_TRUE(evicted);
  const auto forced = Clock::now();
  Attempt next = admin.try_acquire_for("k", 20s);
  ASSERT_TRUE(next) << "the key stayed closed after the evicted lease ran out";
  EXPECT_GE(ms(Clock::now() - forced), evicted->ttl_left.count() - 50) << "taken before the evicted lease's end";
  EXPECT_GT(next.lease().token(), lease.token());
  EXPECT_THROW(lease.release(), LockLostError);
  const auto seen = sole_holder(admin.inspect("k"));
  ASSERT_TRUE(seen) << "the late release of the evicted holder freed the next holder's key";
  EXPECT_EQ(seen->token, next.lease().token());
  next.lease().release();
}

// Lease mode: a waiter registered as the key's heir is handed the key by the evicted holder's
// release, as by any last release: the next token, one hold.
TEST_F(MysqlEviction, LeaseModeEvictedHoldersReleaseHandsTheKeyToTheHeir) {
  const std::string url = table_url("lease");
  Client holder = Client::open(url), admin = Client::open(url), waiter = Client::open(url);
  Lease lease = holder.acquire("k", {.ttl = 30s});
  auto waited = std::async(std::launch::async, [&] { return waiter.try_acquire_for("k", 30s); });
  ASSERT_TRUE(eventually([&] { return column("heir_owner") != ""; }, 10s)) << "the waiter never became the heir";
  ASSERT_FALSE(admin.force_release("k").empty());
  EXPECT_EQ(column("hold_count"), "0");
  EXPECT_EQ(column("owner"), lease.owner());

  EXPECT_THROW(lease.release(), LockLostError);
  ASSERT_EQ(waited.wait_for(10s), std::future_status::ready) << "the heir did not get the key";
  Attempt next = waited.get();
  ASSERT_TRUE(next);
  EXPECT_EQ(next.lease().token(), lease.token() + 1) << "not a handover";
  const auto seen = sole_holder(admin.inspect("k"));
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->owner, next.lease().owner());
  EXPECT_EQ(seen->hold_count, 1u);
  EXPECT_FALSE(seen->evicted);
  next.lease().release();
  EXPECT_TRUE(admin.inspect("k").empty());
}

// Row mode keeps an eviction in the user's own columns: owner, version and expiry stay, the
// hold count goes to 0. The release then clears the owner, as any last release.
TEST_F(MysqlEviction, RowModeEvictionIsKeptInTheLockColumns) {
  test::create_row_table(url_, table_);
  test::insert_row(url_, table_, "k");
  const std::string url = table_url("row");
  Client holder = Client::open(url), admin = Client::open(url);
  Lease lease = holder.acquire("k", {.ttl = 30s});
  const std::string expiry = column("lock_expire_time", "id");
  ASSERT_FALSE(admin.force_release("k").empty());
  EXPECT_EQ(column("lock_owner", "id"), lease.owner());
  EXPECT_EQ(column("version", "id"), std::to_string(lease.token()));
  EXPECT_EQ(column("lock_holds", "id"), "0");
  EXPECT_EQ(column("lock_expire_time", "id"), expiry);
  EXPECT_FALSE(holder.try_acquire("k", {.ttl = 60s})) << "the evicted owner re-entered";
  EXPECT_EQ(column("lock_expire_time", "id"), expiry) << "an attempt of the evicted owner moved its expiry";

  EXPECT_THROW(lease.release(), LockLostError);
  EXPECT_EQ(column("lock_owner", "id"), "");
  EXPECT_EQ(column("lock_holds", "id"), "0");
  Attempt next = admin.try_acquire("k");
  ASSERT_TRUE(next);
  EXPECT_EQ(next.lease().token(), lease.token() + 1);
  next.lease().release();
}

}  // namespace
}  // namespace dlock
