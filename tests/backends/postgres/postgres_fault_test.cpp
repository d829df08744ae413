// Faults on a real PostgreSQL server, through the public API: a server restart under a held
// lock (the lease survives, tokens rise across the restart and clean-up), killed connections
// under a holder and a waiter (pg_terminate_backend: the holder keeps its lease, the waiter
// still gets the key, woken by the release), and the set-up errors that must name their fix.
// Session mode: tokens rise across a restart, a crash (which empties its unlogged tables) and
// clean-up; a restart or a killed connection ends the lock, and its holder learns, readers as
// writers; keys whose advisory lock ids collide share nothing but the wait.
//
// The server is the one scripts/servers/postgres.sh starts (scripts/test.sh does), named by
//   DLOCK_PG_URL        owner of the test database (every case needs it, or skips)
//   DLOCK_PG_ADMIN_URL  a superuser: pg_terminate_backend
//   DLOCK_PG_NONE_URL   may connect, may create nothing
//   DLOCK_PG_DIR        the server's directory, for `postgres.sh restart`
// Every case uses a table of its own. The restart and the terminations hit every client of
// the server: ctest runs these cases alone (RUN_SERIAL).

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/errors.hpp"
#include "support/holders.hpp"
#include "support/server_test.hpp"

namespace dlock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::env;
using test::eventually;
using test::ms;
using test::sole_holder;
using test::with_option;

LockOptions renewed(std::chrono::milliseconds ttl) {
  LockOptions options;
  options.ttl = ttl;
  options.auto_renew = true;
  return options;
}

class PostgresFault : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto url = env("DLOCK_PG_URL");
    if (!url) GTEST_SKIP() << "DLOCK_PG_URL is not set (scripts/servers/postgres.sh writes it)";
    table_ = "f_" + test::random_hex(12);
    url_ = with_option(*url, "table=" + table_);
  }

  // Runs SQL as the superuser; the first column of the first row, or "".
  static std::string admin(const std::string& sql) {
    const auto url = env("DLOCK_PG_ADMIN_URL");
    EXPECT_TRUE(url) << "DLOCK_PG_ADMIN_URL is not set";
    if (!url) return "";
    PGconn* conn = PQconnectdb(url->c_str());
    std::string value;
    if (PQstatus(conn) != CONNECTION_OK) {
      ADD_FAILURE() << PQerrorMessage(conn);
    } else {
      PGresult* result = PQexec(conn, sql.c_str());
      const auto status = PQresultStatus(result);
      if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) ADD_FAILURE() << sql << ": " << PQerrorMessage(conn);
      if (status == PGRES_TUPLES_OK && PQntuples(result) > 0) value = PQgetvalue(result, 0, 0);
      PQclear(result);
    }
    PQfinish(conn);
    return value;
  }

  // Ends every session dlock has open on the server (its application_name); how many.
  static int terminate_dlock_sessions() {
    return std::stoi(admin("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE application_name = 'dlock' AND pid <> pg_backend_pid()"));
  }

  static Clock::duration restart_server() {
    const auto dir = env("DLOCK_PG_DIR");
    EXPECT_TRUE(dir) << "DLOCK_PG_DIR is not set";
    const auto start = Clock::now();
    const std::string command = std::string(DLOCK_SERVER_SCRIPT) + " restart '" + dir.value_or("") + "' >/dev/null";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;  // NOLINT(concurrency-mt-unsafe)
    const auto took = Clock::now() - start;
    std::fprintf(stderr, "restart took %lld ms\n", ms(took));
    return took;
  }

  // Kills one server process with SIGKILL: PostgreSQL then ends every session and recovers as
  // after a crash, which empties unlogged tables. Returns once it accepts connections again.
  static void crash_server() {
    const auto url = env("DLOCK_PG_URL");
    PGconn* conn = PQconnectdb(url.value_or("").c_str());
    ASSERT_EQ(PQstatus(conn), CONNECTION_OK) << PQerrorMessage(conn);
    const int pid = PQbackendPID(conn);
    ASSERT_EQ(::kill(pid, SIGKILL), 0) << "cannot kill server process " << pid;
    PQfinish(conn);
    // The server goes through recovery: connections are refused, then accepted.
    std::this_thread::sleep_for(200ms);
    EXPECT_TRUE(eventually([&] { return PQping(url->c_str()) == PQPING_OK; }, 60s)) << "the server did not come back";
  }

  std::string session_url() const { return with_option(url_, "mode=session"); }

  std::string url_;
  std::string table_;
};

// One statement on a connection of its own: its result rows, each column as text ("" for NULL).
using Rows = std::vector<std::vector<std::string>>;
Rows run_sql(PGconn* conn, const std::string& sql) {
  Rows rows;
  PGresult* result = PQexec(conn, sql.c_str());
  if (PQresultStatus(result) != PGRES_TUPLES_OK) {
    ADD_FAILURE() << sql << ": " << PQerrorMessage(conn);
  } else {
    for (int r = 0; r < PQntuples(result); ++r) {
      auto& row = rows.emplace_back();
      for (int c = 0; c < PQnfields(result); ++c) row.emplace_back(PQgetvalue(result, r, c));
    }
  }
  PQclear(result);
  return rows;
}

// A lease taken before a restart is still ours after it: the row is on disk, its expiry on the
// server's clock. Renewals reconnect and go on; another client cannot take the key; release
// works; the next acquisition's token is above the lease's.
TEST_F(PostgresFault, ALeaseOutlivesARestartAndItsRenewalsGoOn) {
  if (!env("DLOCK_PG_DIR")) GTEST_SKIP() << "DLOCK_PG_DIR is not set";
  const auto ttl = 15s;
  Client holder = Client::open(url_);
  Client other = Client::open(url_);
  Lease lease = holder.acquire("k", renewed(ttl));
  const auto token = lease.token();
  const auto first_valid_until = lease.valid_until();
  std::atomic<bool> lost{false};
  lease.on_lost([&](const LossInfo&) { lost = true; });

  ASSERT_LT(restart_server(), ttl / 2) << "the restart took too long for this test's TTL to tell anything";
  EXPECT_TRUE(lease.held()) << "the lease was dropped by the restart";
  const Attempt attempt = other.try_acquire("k", LockOptions{.ttl = 5s});
  EXPECT_FALSE(attempt) << "another client took a key whose lease survived the restart";
  const auto seen = sole_holder(other.inspect("k"));
  ASSERT_TRUE(seen) << "inspect found the key free after the restart";
  EXPECT_EQ(seen->token, token);

  EXPECT_TRUE(eventually([&] { return lease.valid_until() > first_valid_until + 1s; }, ttl / 2 + 5s))
      << "no renewal succeeded after the restart";
  EXPECT_FALSE(lost.load());
  EXPECT_NO_THROW(lease.release());
  Lease next = other.acquire("k", LockOptions{.ttl = 5s});
  EXPECT_GT(next.token(), token);
}

// Tokens rise across a restart and the clean-up that deleted the key's row in between: the
// sequence a new row starts from was raised past every deleted token, and it survives restarts.
TEST_F(PostgresFault, TokensRiseAcrossRestartAndCleanUp) {
  if (!env("DLOCK_PG_DIR")) GTEST_SKIP() << "DLOCK_PG_DIR is not set";
  std::uint64_t last = 0;
  {
    Client client = Client::open(url_);
    for (int i = 0; i < 5; ++i) {
      Lease lease = client.acquire("k", LockOptions{.ttl = 5s});
      EXPECT_GT(lease.token(), last);
      last = lease.token();
    }
    EXPECT_GE(client.collect_idle(), 1u) << "the released key's row was not cleaned up";
  }
  restart_server();
  Client client = Client::open(url_);
  Lease lease = client.acquire("k", LockOptions{.ttl = 5s});
  EXPECT_GT(lease.token(), last) << "a token came back after a restart and a clean-up";
}

// Every dlock session killed while one client holds the key and another waits for it: the
// holder's lease lives on (renewals reconnect), and the waiter, whose waiting connection was
// killed, still gets the key when the holder lets go, and soon (it is woken, not timed out).
TEST_F(PostgresFault, KilledConnectionsUnderAHolderAndAWaiter) {
  const auto ttl = 20s;
  Client holder = Client::open(url_);
  Client waiter = Client::open(url_);
  Lease lease = holder.acquire("k", renewed(ttl));
  auto waiting = std::async(std::launch::async, [&] {
    auto acquired = waiter.try_acquire_for("k", 30s, LockOptions{.ttl = 5s});
    return std::pair{static_cast<bool>(acquired), Clock::now()};
  });
  // The waiter is next in line: it holds the key's slot (and listens).
  ASSERT_TRUE(eventually([] { return admin("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted") != "0"; },
                         10s))
      << "the waiter never took the key's slot";
  EXPECT_GE(terminate_dlock_sessions(), 2);
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(lease.held());
  EXPECT_EQ(waiting.wait_for(0s), std::future_status::timeout) << "the waiter gave up when its connection was killed";

  const auto released = Clock::now();
  EXPECT_NO_THROW(lease.release());
  const auto [got, at] = waiting.get();
  EXPECT_TRUE(got) << "the waiter never got the key";
  EXPECT_LT(at - released, 3s) << "the waiter was not woken by the release (" << ms(at - released) << " ms)";
}

// The set-up errors name their fix, and never the password.
TEST_F(PostgresFault, SetUpErrorsNameTheFix) {
  const std::string url = *env("DLOCK_PG_URL");
  const auto message_of = [](const std::string& bad_url) -> std::string {
    try {
      Client client = Client::open(bad_url);
      (void)client.inspect("k");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::configuration) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error for " << bad_url;
    return {};
  };
  const std::string wrong_password = message_of(with_option(
      std::string(url).replace(url.find(':', 11) + 1, url.find('@') - url.find(':', 11) - 1, "not-the-password"),
      "table=" + table_));
  EXPECT_NE(wrong_password.find("password"), std::string::npos) << wrong_password;
  EXPECT_EQ(wrong_password.find("not-the-password"), std::string::npos) << wrong_password;
  const std::string no_database =
      message_of(with_option(url.substr(0, url.rfind('/')) + "/no_such_database", "table=" + table_));
  EXPECT_NE(no_database.find("no_such_database"), std::string::npos) << no_database;
  EXPECT_NE(no_database.find("does not exist"), std::string::npos) << no_database;
  if (const auto none = env("DLOCK_PG_NONE_URL")) {
    const std::string no_create = message_of(with_option(*none, "table=" + table_));
    EXPECT_NE(no_create.find("dlock schema postgres"), std::string::npos) << no_create;
  }
}

// Session mode keeps no durable row per acquisition: a clean restart keeps its unlogged table,
// a crash empties it and a new epoch starts; clean-up raises the floor. Tokens rise across all.
TEST_F(PostgresFault, SessionModeTokensRiseAcrossRestartCrashAndCleanUp) {
  if (!env("DLOCK_PG_DIR")) GTEST_SKIP() << "DLOCK_PG_DIR is not set";
  std::uint64_t last = 0;
  const auto next_token = [&] {
    Client client = Client::open(session_url());
    {
      Lease lease = client.acquire("k", LockOptions{.ttl = 5s});
      EXPECT_GT(lease.token(), last) << "a token did not rise";
      last = lease.token();
    }
    return client.collect_idle();
  };
  next_token();
  next_token();
  EXPECT_GE(next_token(), 1u) << "the released key's row was not cleaned up";
  next_token();  // above the floor clean-up raised
  restart_server();
  next_token();
  const std::uint64_t before_crash = last;
  crash_server();
  next_token();
  EXPECT_GE(last >> 40, (before_crash >> 40) + 1) << "no new epoch began after the crash emptied the tables";
}

// A restart ends every session, and so the lock: its holder learns at its next renewal, and
// the key is free at once for another client, with a higher token.
TEST_F(PostgresFault, SessionModeRestartEndsTheLockAndItsHolderLearns) {
  if (!env("DLOCK_PG_DIR")) GTEST_SKIP() << "DLOCK_PG_DIR is not set";
  Client holder = Client::open(session_url());
  Client other = Client::open(session_url());
  Lease lease = holder.acquire("k", renewed(3s));
  const auto token = lease.token();
  std::atomic<bool> lost{false};
  lease.on_lost([&](const LossInfo&) { lost = true; });
  restart_server();
  EXPECT_TRUE(eventually([&] { return lost.load(); }, 5s)) << "the holder never learned its lock ended";
  Attempt attempt = other.try_acquire("k", LockOptions{.ttl = 5s});
  ASSERT_TRUE(attempt) << "the key stayed held after the restart ended its lock";
  EXPECT_GT(attempt.lease().token(), token);
}

// The holder's connection killed: the server frees the key at once and grants it to the queued
// waiter, and the holder learns of its loss at its next renewal.
TEST_F(PostgresFault, SessionModeKilledHolderConnectionFreesTheKey) {
  Client holder = Client::open(session_url());
  Client waiter = Client::open(session_url());
  Lease lease = holder.acquire("k", renewed(2s));
  const auto token = lease.token();
  std::atomic<bool> lost{false};
  lease.on_lost([&](const LossInfo&) { lost = true; });
  auto waiting = std::async(std::launch::async, [&] {
    auto acquired = waiter.try_acquire_for("k", 30s, LockOptions{.ttl = 5s});
    return std::pair{acquired ? acquired.lease().token() : 0, Clock::now()};
  });
  ASSERT_TRUE(eventually(
      [] { return admin("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") != "0"; }, 10s))
      << "the waiter never queued for the lock";
  const auto killed = Clock::now();
  EXPECT_EQ(admin("SELECT count(pg_terminate_backend(pid)) FROM \"" + table_ + "_session\" WHERE key = 'k'"), "1");
  const auto [got, at] = waiting.get();
  EXPECT_GT(got, token) << "the waiter did not get the key with a higher token";
  EXPECT_LT(at - killed, 2s) << "the waiter was not granted the lock at once (" << ms(at - killed) << " ms)";
  EXPECT_TRUE(eventually([&] { return lost.load(); }, 3s)) << "the holder never learned its connection ended";
}

// Readers hold the key's lock in shared mode on connections of their own: their connections
// killed, the server grants the lock to the queued writer at once, and the readers learn.
TEST_F(PostgresFault, SessionModeKilledReaderConnectionsFreeTheKey) {
  Client readers = Client::open(session_url());
  Client writer = Client::open(session_url());
  LockOptions shared = renewed(2s);
  shared.mode = LockMode::shared;
  shared.owner = "first-reader";
  Lease first = readers.acquire("k", shared);
  shared.owner = "second-reader";
  Lease second = readers.acquire("k", shared);
  std::atomic<int> lost{0};
  first.on_lost([&](const LossInfo&) { ++lost; });
  second.on_lost([&](const LossInfo&) { ++lost; });
  auto waiting = std::async(std::launch::async, [&] {
    auto acquired = writer.try_acquire_for("k", 30s, LockOptions{.ttl = 5s});
    return std::pair{acquired ? acquired.lease().token() : 0, Clock::now()};
  });
  ASSERT_TRUE(eventually(
      [] { return admin("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") != "0"; }, 10s))
      << "the writer never queued for the lock";
  const auto killed = Clock::now();
  EXPECT_EQ(admin("SELECT count(pg_terminate_backend(pid)) FROM \"" + table_ + "_session_shared\" WHERE key = 'k'"), "2");
  const auto [got, at] = waiting.get();
  EXPECT_GT(got, std::max(first.token(), second.token())) << "the writer did not get the key with a higher token";
  EXPECT_LT(at - killed, 2s) << "the writer was not granted the lock at once (" << ms(at - killed) << " ms)";
  EXPECT_TRUE(eventually([&] { return lost.load() == 2; }, 3s)) << "the readers never learned their connections ended";
}

// Advisory lock ids are hashes of the keys: two keys may share one. Their owners, holds and
// tokens stay apart; they only wait for each other. Driven through session mode's functions
// with one lock id for two keys.
TEST_F(PostgresFault, SessionModeKeysWhoseLockIdsCollideShareNothingButTheWait) {
  {
    Client client = Client::open(session_url());  // makes the tables and the token floor
    client.acquire("setup", LockOptions{.ttl = 5s}).release();
  }
  PGconn* a = PQconnectdb(env("DLOCK_PG_URL")->c_str());
  PGconn* b = PQconnectdb(env("DLOCK_PG_URL")->c_str());
  ASSERT_EQ(PQstatus(a), CONNECTION_OK) << PQerrorMessage(a);
  ASSERT_EQ(PQstatus(b), CONNECTION_OK) << PQerrorMessage(b);
  const std::string take = "SELECT outcome, owner, token FROM \"" + table_ + "_session_take\"";
  const std::string lock = "4242";
  const auto x = run_sql(a, take + "('x', 'o1', 10000, " + lock + ", false, 1, false)");
  ASSERT_EQ(x.size(), 1u);
  EXPECT_EQ(x[0][0], "acquired");
  // y has no holder to name: it waits for x's, whose owner it is not told of.
  auto y = run_sql(b, take + "('y', 'o2', 10000, " + lock + ", false, 2, false)");
  EXPECT_EQ(y.at(0)[0], "busy");
  EXPECT_EQ(y.at(0)[1], "") << "y was reported held by x's owner";
  EXPECT_EQ(run_sql(b, take + "('x', 'o2', 10000, " + lock + ", false, 2, false)").at(0)[1], "o1");
  EXPECT_EQ(run_sql(a, "SELECT left_holds FROM \"" + table_ + "_session_free\"('x', 'o1', " + x[0][2] + ", 1)").at(0)[0],
            "0");
  y = run_sql(b, take + "('y', 'o2', 10000, " + lock + ", false, 2, false)");
  EXPECT_EQ(y.at(0)[0], "acquired");
  EXPECT_NE(std::stoull(y[0][2]), std::stoull(x[0][2]) + 1) << "y's token came from x's count";
  // x is free, yet waits while y holds the shared lock id; y's holder is o2 alone.
  const auto x_again = run_sql(a, take + "('x', 'o1', 10000, " + lock + ", false, 1, false)");
  EXPECT_EQ(x_again.at(0)[0], "busy");
  EXPECT_EQ(x_again.at(0)[1], "");
  Client client = Client::open(session_url());
  EXPECT_TRUE(client.inspect("x").empty());
  const auto holder = sole_holder(client.inspect("y"));
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->owner, "o2");
  EXPECT_EQ(holder->hold_count, 1u);
  PQfinish(a);
  PQfinish(b);
}

}  // namespace
}  // namespace dlock
