// Faults on a real MariaDB/MySQL server, through the public API: a server restart and killed
// connections under a held lock and a blocked waiter (lease and row mode keep the lock,
// session mode loses it and its holder learns so), an unreachable or silent server, and the
// set-up errors (password, database, privileges) that must name their fix; and lease mode's
// heir handoff, including heirs that give up or whose session ended.
//
// The server is the one scripts/servers/mariadb.sh starts (scripts/test.sh does), named by
//   DLOCK_MYSQL_URL        all rights on the test database (every case needs it, or skips)
//   DLOCK_MYSQL_ADMIN_URL  every privilege: KILL, CREATE of tables for the DML user, clean-up
//   DLOCK_MYSQL_DML_URL    SELECT/INSERT/UPDATE/DELETE only;  DLOCK_MYSQL_NONE_URL  nothing
//   DLOCK_MYSQL_DIR        the server's directory, for `mariadb.sh restart`
// Every case uses a table of its own. The restart and the KILLs hit every client of the
// server: ctest runs these cases alone (RUN_SERIAL).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <mysql.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/mysql/mysql_backend.hpp"
#include "core/stable_hash.hpp"
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

using test::env;
using test::eventually;
using test::ms;
using test::random_hex;
using test::with_option;

// mysql://user:password@host:port/database[?query], as mariadb.sh writes them.
struct UrlParts {
  std::string scheme, user, password, host, port, database, query;

  static UrlParts parse(const std::string& url) {
    UrlParts p;
    const auto sep = url.find("://");
    p.scheme = url.substr(0, sep);
    std::string rest = url.substr(sep + 3);
    if (const auto q = rest.find('?'); q != std::string::npos) {
      p.query = rest.substr(q + 1);
      rest.resize(q);
    }
    const auto at = rest.rfind('@');
    const std::string userinfo = rest.substr(0, at);
    const std::string hostpath = rest.substr(at + 1);
    const auto colon = userinfo.find(':');
    p.user = userinfo.substr(0, colon);
    p.password = colon == std::string::npos ? "" : userinfo.substr(colon + 1);
    const auto slash = hostpath.find('/');
    const std::string hostport = hostpath.substr(0, slash);
    p.database = slash == std::string::npos ? "" : hostpath.substr(slash + 1);
    const auto port_colon = hostport.rfind(':');
    p.host = hostport.substr(0, port_colon);
    p.port = port_colon == std::string::npos ? "3306" : hostport.substr(port_colon + 1);
    return p;
  }

  std::string str() const {
    std::string url = scheme + "://" + user + (password.empty() ? "" : ":" + password) + "@" + host + ":" +
                      port + "/" + database;
    if (!query.empty()) url += "?" + query;
    return url;
  }
};

// A raw Connector/C session, for what dlock itself must not do: KILL, DDL as admin, clean-up.
class RawConnection {
 public:
  explicit RawConnection(const std::string& url) : mysql_(mysql_init(nullptr)) {
    const UrlParts p = UrlParts::parse(url);
    const unsigned timeout = 10;
    mysql_options(mysql_, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
    mysql_options(mysql_, MYSQL_OPT_READ_TIMEOUT, &timeout);
    if (!mysql_real_connect(mysql_, p.host.c_str(), p.user.c_str(), p.password.c_str(), p.database.c_str(),
                            static_cast<unsigned>(std::stoul(p.port)), nullptr, 0)) {
      error_ = mysql_error(mysql_);
    }
  }
  ~RawConnection() { mysql_close(mysql_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // Runs one statement; returns its rows (every column as text, NULL as ""), or nullopt on
  // error (then error() says why).
  std::optional<std::vector<std::vector<std::string>>> query(const std::string& sql) {
    if (mysql_real_query(mysql_, sql.data(), sql.size()) != 0) {
      error_ =
          "MySQL error " + std::to_string(mysql_errno(mysql_)) + ": " + mysql_error(mysql_) + " in: " + sql;
      return std::nullopt;
    }
    std::vector<std::vector<std::string>> rows;
    if (MYSQL_RES* result = mysql_store_result(mysql_)) {
      const unsigned columns = mysql_num_fields(result);
      while (MYSQL_ROW row = mysql_fetch_row(result)) {
        std::vector<std::string> values;
        for (unsigned c = 0; c < columns; ++c) values.emplace_back(row[c] ? row[c] : "");
        rows.push_back(std::move(values));
      }
      mysql_free_result(result);
    }
    return rows;
  }

 private:
  MYSQL* mysql_;
  std::string error_;
};

// Every line the library logs, echoed to stderr (the reason a recovery took long shows there).
class Log {
 public:
  static void install() {
    static std::once_flag once;
    std::call_once(once, [] {
      set_log_handler([](LogLevel, std::string_view message) {
        std::fprintf(stderr, "[dlock log] %.*s\n", static_cast<int>(message.size()), message.data());
        std::lock_guard lock(mutex());
        lines().emplace_back(message);
      });
    });
  }
  static std::vector<std::string> snapshot() {
    std::lock_guard lock(mutex());
    return lines();
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::string>& lines() {
    static std::vector<std::string> l;
    return l;
  }
};

class MysqlFault : public ::testing::Test {
 protected:
  void SetUp() override {
    Log::install();
    const auto url = env("DLOCK_MYSQL_URL");
    if (!url) {
      GTEST_SKIP() << "DLOCK_MYSQL_URL is not set: start a server with scripts/servers/mariadb.sh start DIR "
                      "and export the lines of DIR/env (scripts/test.sh does both)";
    }
    url_ = *url;
    admin_url_ = env("DLOCK_MYSQL_ADMIN_URL").value_or("");
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    table_ = "f_" + name.substr(0, 30) + "_" + std::to_string(::getpid()) + "_" + random_hex(8);
  }

  void TearDown() override {
    if (admin_url_.empty() || table_.empty()) return;
    RawConnection admin(admin_url_);
    if (admin.ok()) {
      admin.query("DROP TABLE IF EXISTS `" + table_ + "`, `" + table_ + "_seq`, `" + table_ + "_activity`, `" + table_ +
                  "_session`, `" + table_ + "_epoch`");
    }
  }

  // Skips the test unless every variable is set.
  bool need(std::initializer_list<const char*> names) {
    for (const char* name : names) {
      if (!env(name)) {
        missing_ = name;
        return false;
      }
    }
    return true;
  }

  // The test's own table on `url` (DLOCK_MYSQL_URL by default).
  std::string table_url(const std::optional<std::string>& url = std::nullopt) const {
    return with_option(url.value_or(url_), "table=" + table_);
  }

  // Runs `call`, a first call on a client whose pooled connections the server dropped: it
  // must reconnect, not throw (`what` names the call). After a failure the call is made once
  // more, as a caller that retries would, and must work.
  template <class F>
  auto first_call_after_drop(const std::string& what, F&& call) -> decltype(call()) {
    try {
      return call();
    } catch (const Error& e) {
      if (!e.retryable()) throw;
      ADD_FAILURE() << what << " threw instead of reconnecting (" << e.what() << ")";
    }
    return call();
  }

  // KILL CONNECTION for every session of `user` (only those in `state`, if given); returns
  // how many were killed.
  int kill_connections_of(const std::string& user, const std::string& state = {}) {
    RawConnection admin(admin_url_);
    if (!admin.ok()) {
      ADD_FAILURE() << "cannot connect as admin: " << admin.error();
      return 0;
    }
    const auto rows = admin.query("SELECT id FROM information_schema.PROCESSLIST WHERE user = '" + user +
                                  "'" + (state.empty() ? "" : " AND state = '" + state + "'"));
    if (!rows) {
      ADD_FAILURE() << admin.error();
      return 0;
    }
    int killed = 0;
    for (const auto& row : *rows) {
      // A session may end by itself meanwhile (unknown thread id): that one is gone anyway.
      if (admin.query("KILL CONNECTION " + row.at(0))) ++killed;
    }
    return killed;
  }

  // The test's own table as a row-mode resource table, with a row for each key.
  std::string row_url(std::initializer_list<const char*> keys) {
    const std::string url = with_option(table_url(), "mode=row");
    test::create_row_table(url_, table_);
    for (const char* key : keys) test::insert_row(url_, table_, key);
    return url;
  }

  // Restarts the server (mariadb.sh restart) and returns how long it took.
  Clock::duration restart_server() {
    const auto start = Clock::now();
    const std::string command =
        std::string(DLOCK_SERVER_SCRIPT) + " restart '" + *env("DLOCK_MYSQL_DIR") + "' >/dev/null";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;  // NOLINT(concurrency-mt-unsafe)
    const auto took = Clock::now() - start;
    std::fprintf(stderr, "restart took %lld ms\n", ms(took));
    return took;
  }

  // Shared by the modes whose lock outlives a connection (lease, row).
  void restart_while_held(const std::string& url);
  void killed_connection(const std::string& url);

  // The test's own table as a row-mode resource table with these id and owner column types,
  // and a row for each id.
  std::string typed_row_url(const std::string& id_type, const std::string& owner_type,
                            std::initializer_list<const char*> ids) {
    RawConnection raw(url_);
    EXPECT_TRUE(raw.ok()) << raw.error();
    EXPECT_TRUE(raw.query("DROP TABLE IF EXISTS `" + table_ + "`")) << raw.error();
    EXPECT_TRUE(raw.query("CREATE TABLE `" + table_ + "` (id " + id_type + " NOT NULL PRIMARY KEY, lock_owner " +
                          owner_type + " NOT NULL DEFAULT '', lock_expire_time DATETIME(6) NULL," +
                          " version BIGINT UNSIGNED NOT NULL DEFAULT 0, lock_holds INT UNSIGNED NOT NULL DEFAULT 0)"))
        << raw.error();
    for (const char* id : ids) {
      EXPECT_TRUE(raw.query("INSERT INTO `" + table_ + "` (id) VALUES ('" + id + "')")) << raw.error();
    }
    return with_option(table_url(), "mode=row");
  }

  // How many sessions of `user` are blocked in GET_LOCK (a waiter's doorbell).
  int sessions_in_user_lock(const std::string& user) {
    RawConnection admin(admin_url_);
    if (!admin.ok()) return -1;
    const auto rows = admin.query("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE user = '" +
                                  user + "' AND state = 'User lock'");
    return rows && !rows->empty() ? std::stoi(rows->at(0).at(0)) : -1;
  }

  std::string url_;
  std::string admin_url_;
  std::string table_;
  std::string missing_;
};

#define NEED(...)                                                                       \
  do {                                                                                  \
    if (!need({__VA_ARGS__}))                                                           \
      GTEST_SKIP() << missing_ << " is not set (scripts/servers/mariadb.sh writes it)"; \
  } while (0)

// Records the first loss of a lease and when it happened.
struct LossProbe {
  std::promise<std::pair<LossInfo, Clock::time_point>> promise;
  std::future<std::pair<LossInfo, Clock::time_point>> future = promise.get_future();
  std::atomic<int> calls{0};

  std::function<void(const LossInfo&)> callback() {
    return [this](const LossInfo& info) {
      if (calls++ == 0) promise.set_value({info, Clock::now()});
    };
  }
  bool wait(Clock::duration timeout) { return future.wait_for(timeout) == std::future_status::ready; }
};

LockOptions renewed(std::chrono::milliseconds ttl) {
  LockOptions options;
  options.ttl = ttl;
  options.auto_renew = true;
  return options;
}

// ---- The server goes away and comes back ----

// A lease taken before a server restart is still ours after it: the row is on disk and its
// expiry is judged by the server's clock. The holder's renewals reconnect and go on, another
// client (opened before the restart too) cannot take the key, and release works.
void MysqlFault::restart_while_held(const std::string& url) {
  const auto ttl = 15s;
  Client holder = Client::open(url);
  Client other = Client::open(url);
  Lease lease = holder.acquire("k", renewed(ttl));
  const std::uint64_t token = lease.token();
  const auto first_valid_until = lease.valid_until();
  std::atomic<bool> loss_reported{false};
  std::string loss_message;
  std::mutex loss_mutex;
  lease.on_lost([&](const LossInfo& info) {
    std::lock_guard lock(loss_mutex);
    loss_message = info.message;
    loss_reported = true;
  });

  const auto restart_took = restart_server();
  ASSERT_LT(restart_took, ttl / 2) << "the restart took too long for this test's TTL to tell anything";

  EXPECT_TRUE(lease.held()) << "the lease was dropped by the restart";
  EXPECT_FALSE(lease.lost());

  // The other client's pooled connection died with the server.
  Attempt attempt = first_call_after_drop("try_acquire on a client opened before a server restart",
                                          [&] { return other.try_acquire("k", LockOptions{.ttl = 5s}); });
  EXPECT_FALSE(attempt) << "another client took a key whose lease survived the restart";
  if (!attempt) {
    const auto named = sole_holder(attempt.holders());
    ASSERT_TRUE(named);
    EXPECT_EQ(named->token, token);
    EXPECT_EQ(named->owner, lease.owner());
  }
  const auto seen = sole_holder(other.inspect("k"));
  ASSERT_TRUE(seen) << "inspect found the key free after the restart";
  EXPECT_EQ(seen->token, token);
  EXPECT_EQ(seen->owner, lease.owner());

  // Renewals go on: valid_until moves past where the acquire put it (first renewal at ttl/3;
  // one failed try on a dead connection costs ttl/10 more).
  EXPECT_TRUE(eventually([&] { return lease.valid_until() > first_valid_until + 1s; }, ttl / 2 + 5s))
      << "no renewal succeeded after the restart";
  EXPECT_TRUE(lease.held());
  EXPECT_FALSE(loss_reported.load()) << loss_message;
  const auto after = sole_holder(other.inspect("k"));
  ASSERT_TRUE(after);
  EXPECT_EQ(after->token, token);
  EXPECT_GT(after->ttl_left, ttl - ttl / 3 - 2s) << "the server's expiry did not move with the renewal";

  EXPECT_NO_THROW(lease.release());
  EXPECT_TRUE(other.inspect("k").empty()) << "the key is still held after release";
  Attempt next = other.try_acquire("k", LockOptions{.ttl = 5s});
  ASSERT_TRUE(next) << "the key could not be taken after the release";
  EXPECT_GT(next.lease().token(), token);
  EXPECT_NO_THROW(next.lease().release());
}

TEST_F(MysqlFault, ServerRestartWhileHeld) {
  NEED("DLOCK_MYSQL_DIR");
  restart_while_held(table_url());
}

// Row mode keeps the lock in the user's rows, on disk like lease mode's.
TEST_F(MysqlFault, RowModeServerRestartWhileHeld) {
  NEED("DLOCK_MYSQL_DIR");
  restart_while_held(row_url({"k"}));
}

// Session mode: the lock is the holder's session, and a restart ends every session. Another
// client may take the key as soon as the server is back, with a higher token, and the holder
// learns of the loss (its connection closed; or at its next renewal, "not yours").
TEST_F(MysqlFault, SessionModeServerRestartLosesTheLock) {
  NEED("DLOCK_MYSQL_DIR");
  // Long enough that a restart on a loaded machine (3.2 s once in CI) leaves the lease alive
  // by its TTL: the key is then free only because the restart ended the holder's session.
  const auto ttl = 15s;
  const std::string url = with_option(table_url(), "mode=session");
  Client holder = Client::open(url);
  Client other = Client::open(url);
  Lease lease = holder.acquire("k", renewed(ttl));
  const std::uint64_t token = lease.token();
  LossProbe probe;
  lease.on_lost(probe.callback());

  const auto restart_took = restart_server();
  ASSERT_LT(restart_took, ttl / 3) << "the restart took too long for this test's TTL to tell anything";
  const auto back = Clock::now();

  Attempt taken = first_call_after_drop("try_acquire on a client opened before a server restart",
                                        [&] { return other.try_acquire("k", LockOptions{.ttl = 5s}); });
  ASSERT_TRUE(taken) << "the key was still held after the restart ended the holder's session";
  EXPECT_GT(taken.lease().token(), token);

  ASSERT_TRUE(probe.wait(ttl)) << "the holder never learned that the restart ended its lock";
  const auto [info, lost_at] = probe.future.get();
  std::fprintf(stderr, "the holder learned of the loss %lld ms after the server was back: %s\n",
               ms(lost_at - back), info.message.c_str());
  EXPECT_EQ(info.reason, LossReason::not_owner) << to_string(info.reason) << ": " << info.message;
  EXPECT_EQ(info.token, token);
  EXPECT_FALSE(lease.held());
  EXPECT_THROW(lease.release(), LockLostError);
  EXPECT_NO_THROW(taken.lease().release());
}

// Session mode keeps a key's state and its token floor in memory tables, which a restart
// empties: tokens still rise, across two restarts, idle clean-up (collect_idle removes the
// released row, so the next token comes from the floor) and a client opened before them.
TEST_F(MysqlFault, SessionModeTokensRiseAcrossRestartsAndCleanUp) {
  NEED("DLOCK_MYSQL_DIR");
  const std::string url = with_option(table_url(), "mode=session");
  Client client = Client::open(url);
  std::uint64_t last = 0;
  const auto cycle = [&](const char* after) {
    Lease lease = first_call_after_drop(std::string("acquire ") + after, [&] { return client.acquire("k"); });
    EXPECT_GT(lease.token(), last) << "the token went back " << after;
    last = lease.token();
    lease.release();
  };
  cycle("at first");
  cycle("again");
  EXPECT_GE(client.collect_idle(), 1u);
  cycle("after the clean-up");
  restart_server();
  cycle("after a restart");
  EXPECT_GE(first_call_after_drop("collect_idle after a restart", [&] { return client.collect_idle(); }), 1u);
  cycle("after a restart and a clean-up");
  restart_server();
  cycle("after a second restart");
  Client fresh = Client::open(url);
  Lease lease = fresh.acquire("k");
  EXPECT_GT(lease.token(), last) << "a new client's token went back";
}

// Session mode's memory table has a size fixed when it was made. Released rows are removed
// to make room when it is full; a table full of held keys is an error naming the fix.
TEST_F(MysqlFault, SessionModeFullMemoryTable) {
  const std::string url = with_option(table_url(), "mode=session");
  { Client made = Client::open(url); }
  RawConnection raw(url_);
  ASSERT_TRUE(raw.ok()) << raw.error();
  const auto ddl = raw.query("SHOW CREATE TABLE `" + table_ + "_session`");
  ASSERT_TRUE(ddl && ddl->size() == 1) << raw.error();
  ASSERT_TRUE(raw.query("DROP TABLE `" + table_ + "_session`")) << raw.error();
  ASSERT_TRUE(raw.query("SET SESSION max_heap_table_size = 65536")) << raw.error();  // some 50 rows
  ASSERT_TRUE(raw.query(ddl->at(0).at(1))) << raw.error();

  Client client = Client::open(url);
  for (int i = 0; i < 200; ++i) client.acquire("k" + std::to_string(i)).release();
  std::vector<Lease> held;
  try {
    for (int i = 0; i < 200; ++i) held.push_back(client.acquire("held" + std::to_string(i)));
    ADD_FAILURE() << "200 keys held in a table of some 50 rows";
  } catch (const ConfigurationError& e) {
    EXPECT_NE(std::string(e.what()).find("max_heap_table_size"), std::string::npos) << e.what();
    EXPECT_GT(held.size(), 10u) << e.what();
  }
}

// KILL CONNECTION while a holder renews and a waiter on another client is blocked in its
// doorbell (GET_LOCK): first the waiter's session alone, then every session of the dlock
// user. Both recover: the holder keeps the lease, renews, and releases cleanly even right
// after a further KILL; the waiter goes on waiting and gets the key after that release.
void MysqlFault::killed_connection(const std::string& url) {
  const std::string user = UrlParts::parse(url).user;
  const auto ttl = 6s;
  Client holder_client = Client::open(url);
  Client waiter_client = Client::open(url);
  Lease lease = holder_client.acquire("k", renewed(ttl));
  const std::uint64_t token = lease.token();
  std::atomic<bool> loss_reported{false};
  lease.on_lost([&](const LossInfo&) { loss_reported = true; });

  struct WaiterResult {
    bool acquired = false;
    std::uint64_t token = 0;
    std::string error;  // what the acquire threw, if it did
    bool retryable = false;
    Clock::time_point at;
  };
  std::atomic<bool> waiter_done{false};
  auto waiter = std::async(std::launch::async, [&] {
    WaiterResult result;
    try {
      Attempt attempt = waiter_client.try_acquire_for("k", 60s, renewed(ttl));
      result.at = Clock::now();
      if (attempt) {
        result.acquired = true;
        result.token = attempt.lease().token();
        attempt.lease().release();
      }
    } catch (const Error& e) {
      result.at = Clock::now();
      result.error = e.what();
      result.retryable = e.retryable();
    } catch (const std::exception& e) {
      result.at = Clock::now();
      result.error = e.what();
    }
    waiter_done = true;
    return result;
  });
  ASSERT_TRUE(eventually([&] { return sessions_in_user_lock(user) >= 1; }, 10s))
      << "the waiter never blocked in GET_LOCK";

  // First the waiter's doorbell session alone, in its GET_LOCK: the waiter must go on waiting.
  int killed = kill_connections_of(user, "User lock");
  EXPECT_EQ(killed, 1) << "expected one session blocked in GET_LOCK: the waiter's";
  std::this_thread::sleep_for(500ms);
  bool waiter_broke = false;
  const auto check_waiter = [&](const std::string& when) {
    if (waiter_broke || !waiter_done.load()) return;
    waiter_broke = true;
    WaiterResult early = waiter.get();
    ADD_FAILURE() << "the waiter stopped waiting while the key was held, when " << when << ": "
                  << (early.acquired ? "it acquired the key, token " + std::to_string(early.token) : early.error);
  };
  check_waiter("its GET_LOCK session was killed");

  // Then every session of the user: the holder's too.
  const auto before_kill = lease.valid_until();
  killed = kill_connections_of(user);
  std::fprintf(stderr, "killed %d connections of '%s'\n", killed, user.c_str());
  EXPECT_GE(killed, waiter_broke ? 1 : 2)
      << "expected the holder's session, and the waiter's if it still waits";

  // At once, on the holder's client, before the renewal thread has met the dead connection.
  std::optional<LockInfo> seen =
      first_call_after_drop("inspect on a client whose idle connection was killed",
                            [&] { return sole_holder(holder_client.inspect("k")); });
  ASSERT_TRUE(seen) << "the key is free after the KILL";
  EXPECT_EQ(seen->token, token);

  // The holder renews on a new connection: valid_until moves forward.
  EXPECT_TRUE(eventually([&] { return lease.valid_until() > before_kill + 1s; }, ttl))
      << "no renewal succeeded after the holder's connection was killed";
  EXPECT_TRUE(lease.held());
  EXPECT_FALSE(lease.lost());
  EXPECT_FALSE(loss_reported.load());

  check_waiter("every session of its user was killed");

  // A second KILL right before the release: release must reconnect, not fail.
  killed = kill_connections_of(user);
  std::fprintf(stderr, "killed %d more connections of '%s'\n", killed, user.c_str());
  first_call_after_drop("release on a client whose idle connection was killed", [&] { lease.release(); });
  EXPECT_FALSE(lease.held());
  const auto released_at = Clock::now();

  WaiterResult result;
  if (waiter_broke) {
    // As a caller would: try again on the same client.
    try {
      Attempt again = waiter_client.try_acquire_for("k", 10s, renewed(ttl));
      result.at = Clock::now();
      ASSERT_TRUE(again) << "a new acquire on the waiter's client did not get the released key";
      result.acquired = true;
      result.token = again.lease().token();
      again.lease().release();
    } catch (const std::exception& e) {
      FAIL() << "a new acquire on the waiter's client threw after the KILL: " << e.what();
    }
  } else {
    ASSERT_EQ(waiter.wait_for(30s), std::future_status::ready)
        << "the waiter did not get the key after release";
    result = waiter.get();
  }
  EXPECT_TRUE(result.acquired) << result.error;
  EXPECT_GT(result.token, token);
  const auto waited = result.at - released_at;
  // A waiter woken by the doorbell takes over at once; one whose doorbell died with its
  // session backs off until the holder's lease end, which the release cut short.
  EXPECT_LT(waited, ttl + 2s) << "the waiter took " << ms(waited) << " ms to notice the release";
  std::fprintf(stderr, "the waiter had the key %lld ms after release\n", ms(waited));
  const auto left = sole_holder(holder_client.inspect("k"));
  EXPECT_FALSE(left) << "still held by " << left->owner << " (token " << left->token << ", " << left->hold_count
                     << " holds; the holder's token was " << token << ", the waiter's " << result.token << ")";
}

TEST_F(MysqlFault, KilledConnection) {
  NEED("DLOCK_MYSQL_ADMIN_URL");
  killed_connection(table_url());
}

TEST_F(MysqlFault, RowModeKilledConnection) {
  NEED("DLOCK_MYSQL_ADMIN_URL");
  killed_connection(row_url({"k"}));
}

// Defect: a TLS session the server ended fails with CR_SSL_CONNECTION_ERROR rather than
// "server lost", which was not taken for a broken connection: the waiter gave up.
TEST_F(MysqlFault, KilledTlsConnectionIsABrokenConnection) {
  NEED("DLOCK_MYSQL_ADMIN_URL", "DLOCK_MYSQL_TLS_URL");
  killed_connection(table_url(env("DLOCK_MYSQL_TLS_URL")));
}

// Session mode: KILL CONNECTION of the holder's session frees the key at once. A waiter on
// another client, blocked on the key, gets it without waiting for any TTL, and the holder
// learns of the loss as its connection ends, not at its next renewal.
TEST_F(MysqlFault, SessionModeKilledHolder) {
  NEED("DLOCK_MYSQL_ADMIN_URL");
  const auto ttl = 6s;
  const std::string url = with_option(table_url(), "mode=session");
  Client holder_client = Client::open(url);
  Client waiter_client = Client::open(url);
  Lease lease = holder_client.acquire("k", renewed(ttl));
  const std::uint64_t token = lease.token();
  LossProbe probe;
  lease.on_lost(probe.callback());

  auto waiter = std::async(std::launch::async, [&] {
    Attempt attempt = waiter_client.try_acquire_for("k", 60s, LockOptions{.ttl = 30s});
    return std::make_pair(std::move(attempt), Clock::now());
  });
  const std::string user = UrlParts::parse(url_).user;
  ASSERT_TRUE(eventually([&] { return sessions_in_user_lock(user) >= 1; }, 10s))
      << "the waiter never blocked in GET_LOCK";

  RawConnection admin(admin_url_);
  ASSERT_TRUE(admin.ok()) << admin.error();
  const auto session = admin.query("SELECT session_id FROM `" + table_ + "_session` WHERE name = 'k'");
  ASSERT_TRUE(session && session->size() == 1) << admin.error();
  const auto killed_at = Clock::now();
  ASSERT_TRUE(admin.query("KILL CONNECTION " + session->at(0).at(0))) << admin.error();

  ASSERT_EQ(waiter.wait_for(ttl), std::future_status::ready) << "the waiter did not get the key of a killed session";
  auto [attempt, at] = waiter.get();
  ASSERT_TRUE(attempt) << "the waiter gave up on the key of a killed session";
  EXPECT_GT(attempt.lease().token(), token);
  std::fprintf(stderr, "the waiter had the key %lld ms after the KILL\n", ms(at - killed_at));
  EXPECT_LT(at - killed_at, 2s) << "the waiter waited for a timeout, not for the session's end";

  ASSERT_TRUE(probe.wait(ttl)) << "the holder never learned that its session was killed";
  const auto [info, lost_at] = probe.future.get();
  EXPECT_EQ(info.reason, LossReason::not_owner) << to_string(info.reason) << ": " << info.message;
  std::fprintf(stderr, "the holder learned of its loss %lld ms after the KILL\n", ms(lost_at - killed_at));
  EXPECT_LT(lost_at - killed_at, 100ms) << "the holder did not learn of its connection's end as it happened";
  EXPECT_THROW(lease.release(), LockLostError);
  EXPECT_NO_THROW(attempt.lease().release());
}

// ---- The server is not there ----

// Nothing listens on the port: a ConnectionError naming host and port, at once.
TEST_F(MysqlFault, ServerDownAtStartup) {
  // A port that was free a moment ago: bind to 0, read it back, close.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string port = std::to_string(ntohs(address.sin_port));
  ::close(fd);

  UrlParts p = UrlParts::parse(url_);
  p.host = "127.0.0.1";
  p.port = port;
  const auto start = Clock::now();
  try {
    Client::open(with_option(p.str(), "connect_timeout=1s"));
    FAIL() << "opened a client on a port nothing listens on";
  } catch (const ConnectionError& e) {
    const std::string message = e.what();
    std::fprintf(stderr, "error: %s\n", message.c_str());
    EXPECT_NE(message.find("127.0.0.1"), std::string::npos) << message;
    EXPECT_NE(message.find(":" + port), std::string::npos) << message;
    EXPECT_TRUE(e.retryable());
    EXPECT_EQ(message.find(p.password), std::string::npos) << "the password leaked: " << message;
  } catch (const std::exception& e) {
    FAIL() << "expected dlock::ConnectionError, got: " << e.what();
  }
  EXPECT_LT(Clock::now() - start, 3s) << "took " << ms(Clock::now() - start) << " ms";
}

// Something accepts TCP connections but never answers (a hung server, a wrong service): open
// gives up after connect_timeout, not after read_timeout or never.
TEST_F(MysqlFault, SilentServerAtStartup) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(fd, 16), 0);  // the kernel completes handshakes; nobody ever writes
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string port = std::to_string(ntohs(address.sin_port));

  UrlParts p = UrlParts::parse(url_);
  p.host = "127.0.0.1";
  p.port = port;
  auto opening =
      std::async(std::launch::async, [url = with_option(p.str(), "connect_timeout=1s")]() -> std::string {
        try {
          Client::open(url);
          return "opened a client on a server that never answers";
        } catch (const Error& e) {
          return e.what();
        }
      });
  const auto start = Clock::now();
  const bool finished = opening.wait_for(15s) == std::future_status::ready;
  const auto took = Clock::now() - start;
  if (!finished) {
    ::close(fd);  // the handshake read now ends, and the future with it
    ADD_FAILURE() << "Client::open with connect_timeout=1s still waited after 15 s on a silent server";
    opening.wait();
    return;
  }
  ::close(fd);
  const std::string message = opening.get();
  std::fprintf(stderr, "silent server: %lld ms: %s\n", ms(took), message.c_str());
  EXPECT_NE(message.find(":" + port), std::string::npos) << message;
  EXPECT_LT(took, 5s) << "connect_timeout=1s, yet open took " << ms(took) << " ms";
}

// ---- Set-up errors name their fix ----

TEST_F(MysqlFault, WrongPassword) {
  UrlParts p = UrlParts::parse(url_);
  const std::string wrong = "wrong-pw-" + random_hex(8);
  p.password = wrong;
  try {
    Client::open(with_option(p.str(), "table=" + table_));
    FAIL() << "opened a client with a wrong password";
  } catch (const ConfigurationError& e) {
    const std::string message = e.what();
    std::fprintf(stderr, "error: %s\n", message.c_str());
    EXPECT_NE(message.find("'" + p.user + "'"), std::string::npos) << "the user is not named: " << message;
    EXPECT_NE(message.find("password"), std::string::npos) << message;
    EXPECT_EQ(message.find(wrong), std::string::npos) << "the password leaked: " << message;
  } catch (const std::exception& e) {
    FAIL() << "expected dlock::ConfigurationError, got: " << e.what();
  }
}

// A database that does not exist: named in the error, for a user with rights on other
// databases only (the server says "access denied") and for one with every right.
TEST_F(MysqlFault, UnknownDatabase) {
  const std::string database = "dlock_nope_" + random_hex(8);
  std::vector<std::string> urls = {url_};
  if (!admin_url_.empty()) urls.push_back(admin_url_);
  for (const std::string& url : urls) {
    UrlParts p = UrlParts::parse(url);
    p.database = database;
    try {
      Client::open(p.str());
      ADD_FAILURE() << "opened a client on database " << database << " as " << p.user;
    } catch (const ConfigurationError& e) {
      const std::string message = e.what();
      std::fprintf(stderr, "error: %s\n", message.c_str());
      EXPECT_NE(message.find("'" + database + "'"), std::string::npos)
          << "the database is not named: " << message;
      EXPECT_EQ(message.find(p.password), std::string::npos) << "the password leaked: " << message;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "as " << p.user << ": expected dlock::ConfigurationError, got: " << e.what();
    }
  }
}

// A user with DML rights only cannot create the table: the error names `dlock schema mysql`.
// Once an admin ran that DDL, the same user locks and unlocks. A user with no rights on the
// database hears which user and which database.
TEST_F(MysqlFault, MissingPrivileges) {
  NEED("DLOCK_MYSQL_DML_URL", "DLOCK_MYSQL_NONE_URL", "DLOCK_MYSQL_ADMIN_URL");
  const std::string dml_url = table_url(env("DLOCK_MYSQL_DML_URL"));
  const std::string dml_user = UrlParts::parse(dml_url).user;
  try {
    Client::open(dml_url);
    FAIL() << "the DML user opened a client on a table that does not exist";
  } catch (const ConfigurationError& e) {
    const std::string message = e.what();
    std::fprintf(stderr, "error: %s\n", message.c_str());
    EXPECT_NE(message.find("dlock schema mysql"), std::string::npos) << message;
    EXPECT_NE(message.find(table_), std::string::npos) << "the table is not named: " << message;
    EXPECT_NE(message.find("'" + dml_user + "'"), std::string::npos) << "the user is not named: " << message;
  } catch (const std::exception& e) {
    FAIL() << "expected dlock::ConfigurationError, got: " << e.what();
  }

  {
    RawConnection admin(admin_url_);
    ASSERT_TRUE(admin.ok()) << admin.error();
    const std::string ddl = backends::mysql_schema("lease", table_);
    for (std::size_t start = 0; start < ddl.size();) {
      std::size_t end = ddl.find(";\n", start);
      if (end == std::string::npos) end = ddl.size();
      const std::string statement = ddl.substr(start, end - start);
      if (statement.find_first_not_of(" \n") != std::string::npos) {
        ASSERT_TRUE(admin.query(statement)) << admin.error();
      }
      start = end + 2;
    }
  }
  try {
    Client client = Client::open(dml_url);
    Lease lease = client.acquire("k", LockOptions{.ttl = 10s});
    const auto seen = sole_holder(client.inspect("k"));
    ASSERT_TRUE(seen);
    EXPECT_EQ(seen->token, lease.token());
    lease.release();
    EXPECT_TRUE(client.inspect("k").empty());
  } catch (const std::exception& e) {
    FAIL() << "the DML user failed on the table an admin created: " << e.what();
  }

  const std::string none_url = table_url(env("DLOCK_MYSQL_NONE_URL"));
  const UrlParts none = UrlParts::parse(none_url);
  try {
    Client::open(none_url);
    FAIL() << "a user without any right on the database opened a client";
  } catch (const ConfigurationError& e) {
    const std::string message = e.what();
    std::fprintf(stderr, "error: %s\n", message.c_str());
    EXPECT_NE(message.find("'" + none.user + "'"), std::string::npos) << "the user is not named: " << message;
    EXPECT_NE(message.find("'" + none.database + "'"), std::string::npos)
        << "the database is not named: " << message;
  } catch (const std::exception& e) {
    FAIL() << "expected dlock::ConfigurationError, got: " << e.what();
  }
}

// A lock table made by an earlier dlock, without the columns this one needs: the error
// names the table and the ALTER TABLE that adds them, and nothing is changed.
TEST_F(MysqlFault, TableOfAnEarlierVersionNamesTheAlterTable) {
  { Client::open(table_url()); }  // makes the table
  RawConnection raw(url_);
  ASSERT_TRUE(raw.ok()) << raw.error();
  ASSERT_TRUE(raw.query("ALTER TABLE `" + table_ + "` DROP COLUMN heir_owner, DROP COLUMN heir_ttl_us, DROP COLUMN heir_session"))
      << raw.error();
  try {
    Client::open(table_url());
    FAIL() << "a table without the heir columns was accepted";
  } catch (const ConfigurationError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("ALTER TABLE `" + table_ + "` ADD COLUMN"), std::string::npos) << message;
    EXPECT_NE(message.find("heir_owner"), std::string::npos) << message;
  }
  const auto columns = raw.query("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
                                 " AND TABLE_NAME = '" + table_ + "' AND COLUMN_NAME LIKE 'heir%'");
  ASSERT_TRUE(columns) << raw.error();
  EXPECT_EQ(columns->at(0).at(0), "0") << "dlock changed the table itself";
}

// ---- Row mode: one key, one row, one owner ----

// What try_acquire of `key` threw (an InvalidArgument, for these keys), or why it did not.
std::string refused_key(Client& client, const std::string& key) {
  try {
    Attempt attempt = client.try_acquire(key, LockOptions{.ttl = 10s});
    return attempt ? "acquired" : "held by " + sole_holder(attempt.holders())->owner;
  } catch (const InvalidArgument& e) {
    return e.what();
  }
}

// Defect: under a case-insensitive collation of the id column, 'a', 'A' and 'a ' were one
// row, so one lock. Such a column is refused, naming the table, the column, the collation
// and the fix, unless id_collation=any accepts it.
TEST_F(MysqlFault, RowModeRefusesAnIdColumnWhoseCollationFoldsKeys) {
  const std::string url =
      typed_row_url("VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", "VARBINARY(128)", {"a"});
  try {
    Client::open(url);
    FAIL() << "opened row mode on an id column with collation utf8mb4_general_ci";
  } catch (const ConfigurationError& e) {
    const std::string message = e.what();
    std::fprintf(stderr, "error: %s\n", message.c_str());
    for (const std::string& part : {"'" + table_ + "'", std::string("`id`"), std::string("utf8mb4_general_ci"),
                                    std::string("ALTER TABLE"), std::string("utf8mb4_nopad_bin"),
                                    std::string("VARBINARY"), std::string("id_collation=any")}) {
      EXPECT_NE(message.find(part), std::string::npos) << part << " is not named: " << message;
    }
  }
  // Accepted, keys the collation holds equal are one lock.
  Client client = Client::open(with_option(url, "id_collation=any"));
  Client other = Client::open(with_option(url, "id_collation=any"));
  Lease lease = client.acquire("a", LockOptions{.ttl = 10s});
  EXPECT_EQ(refused_key(other, "A"), "held by " + lease.owner());
  EXPECT_EQ(refused_key(other, "a "), "held by " + lease.owner());
  lease.release();
}

// Columns that tell keys apart are taken: binary strings, and binary collations. A binary
// collation that pads with spaces (utf8mb4_bin) ignores trailing spaces, so a key ending in
// one is refused rather than taken for the row without them.
TEST_F(MysqlFault, RowModeTakesIdColumnsThatTellKeysApart) {
  for (const std::string type : {"VARBINARY(64)", "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin",
                                 "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"}) {
    SCOPED_TRACE(type);
    const std::string url = typed_row_url(type, "VARBINARY(128)", {"a"});
    Client client = Client::open(url);
    Client other = Client::open(url);
    Lease lease = client.acquire("a", LockOptions{.ttl = 10s});
    EXPECT_NE(refused_key(other, "A").find("insert it first"), std::string::npos) << refused_key(other, "A");
    const std::string trailing = refused_key(other, "a ");
    if (type.find("utf8mb4_bin") != std::string::npos) {
      EXPECT_NE(trailing.find("utf8mb4_bin"), std::string::npos) << trailing;
      EXPECT_TRUE(other.inspect("a ").empty()) << "a key that is refused is reported held";
    } else {
      EXPECT_NE(trailing.find("insert it first"), std::string::npos) << trailing;
    }
    lease.release();
  }
}

// Defect: an integer id compares as a number, so '01' and '-0' were the locks of rows 1 and 0.
TEST_F(MysqlFault, RowModeIntegerIdRefusesKeysWrittenOtherwise) {
  const std::string url = typed_row_url("BIGINT", "VARBINARY(128)", {"0", "1"});
  Client client = Client::open(url);
  Client other = Client::open(url);
  Lease one = client.acquire("1", LockOptions{.ttl = 10s});
  Lease zero = client.acquire("0", LockOptions{.ttl = 10s});
  for (const char* key : {"01", "-0", "001"}) {
    const std::string message = refused_key(other, key);
    EXPECT_NE(message.find("decimal integers"), std::string::npos) << key << ": " << message;
    EXPECT_TRUE(other.inspect(key).empty()) << key;
  }
  one.release();
  zero.release();
}

// Defect: under a case-insensitive owner column (a VARCHAR's usual collation), owner 'worker'
// re-entered the lock 'Worker' held: two holders. Owners compare as bytes.
TEST_F(MysqlFault, RowModeOwnersThatDifferInCaseAreTwoOwners) {
  const std::string url =
      typed_row_url("VARBINARY(64)", "VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", {"k"});
  Client client = Client::open(url);
  Lease lease = client.acquire("k", LockOptions{.ttl = 10s, .owner = "Worker"});
  Attempt attempt = client.try_acquire("k", LockOptions{.ttl = 10s, .owner = "worker"});
  ASSERT_FALSE(attempt) << "owner 'worker' got the lock 'Worker' holds";
  EXPECT_EQ(sole_holder(attempt.holders())->owner, "Worker");
  EXPECT_THROW(client.release("k", "worker", lease.token()), LockLostError);
  EXPECT_TRUE(lease.held());
  lease.release();
}

// ---- Lease mode's heir handoff (src/backends/mysql/README.md) ----

// The heir column of the test's row, read as the server has it.
std::string heir_of(RawConnection& raw, const std::string& table) {
  const auto rows = raw.query("SELECT heir_owner FROM `" + table + "` WHERE name = 'k'");
  return rows && rows->size() == 1 ? rows->at(0).at(0) : "(" + raw.error() + ")";
}

// A waiter registers as the key's heir; the holder's release hands it the key, with the next
// token and one hold, and the heir's own release frees it.
TEST_F(MysqlFault, ReleaseHandsTheKeyToTheHeir) {
  Client holder_client = Client::open(table_url());
  Client waiter_client = Client::open(table_url());
  RawConnection raw(url_);
  ASSERT_TRUE(raw.ok()) << raw.error();
  Lease held = holder_client.acquire("k", LockOptions{.ttl = 30s});
  auto waiter = std::async(std::launch::async, [&] { return waiter_client.try_acquire_for("k", 30s); });
  ASSERT_TRUE(eventually([&] { return !heir_of(raw, table_).empty(); }, 10s)) << "the waiter never became the heir";

  held.release();
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready) << "the heir did not get the released key";
  Attempt attempt = waiter.get();
  ASSERT_TRUE(attempt) << "the heir gave up";
  EXPECT_EQ(attempt.lease().token(), held.token() + 1);
  const auto seen = sole_holder(holder_client.inspect("k"));
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->owner, attempt.lease().owner());
  EXPECT_EQ(seen->hold_count, 1U) << "the handover was counted as a re-entry";
  EXPECT_EQ(heir_of(raw, table_), "");
  attempt.lease().release();
  EXPECT_TRUE(holder_client.inspect("k").empty()) << "the heir's release left the key held";
}

// A heir that stops waiting withdraws: the holder's release then frees the key for anyone.
TEST_F(MysqlFault, HeirThatGivesUpIsNotHandedTheKey) {
  Client holder_client = Client::open(table_url());
  Client waiter_client = Client::open(table_url());
  RawConnection raw(url_);
  ASSERT_TRUE(raw.ok()) << raw.error();
  Lease held = holder_client.acquire("k", LockOptions{.ttl = 30s});
  Attempt gave_up = waiter_client.try_acquire_for("k", 500ms);
  ASSERT_FALSE(gave_up);
  EXPECT_EQ(heir_of(raw, table_), "") << "the heir that gave up is still registered";

  held.release();
  EXPECT_TRUE(holder_client.inspect("k").empty()) << "the key went to a heir that had given up";
  Attempt next = waiter_client.try_acquire("k");
  ASSERT_TRUE(next);
  EXPECT_EQ(next.lease().token(), held.token() + 1);
  next.lease().release();
}

// A heir whose session ended (its process died) is passed over, not handed a key nobody
// would use until its TTL ran out.
TEST_F(MysqlFault, HeirWhoseSessionEndedIsPassedOver) {
  Client client = Client::open(table_url());
  Lease held = client.acquire("k", LockOptions{.ttl = 30s});
  {
    RawConnection ghost(url_);
    ASSERT_TRUE(ghost.ok()) << ghost.error();
    ASSERT_TRUE(ghost.query("UPDATE `" + table_ +
                            "` SET heir_owner = 'ghost', heir_ttl_us = 60000000, heir_session = CONNECTION_ID()"
                            " WHERE name = 'k'"))
        << ghost.error();
  }  // the ghost's session ends
  held.release();
  const auto seen = sole_holder(client.inspect("k"));
  EXPECT_FALSE(seen) << "the key went to '" << (seen ? seen->owner : "") << "'";
  Attempt next = client.try_acquire("k");
  ASSERT_TRUE(next);
  next.lease().release();
}

// Defect: a KILL returns before the session ends, so a release could hand the key to a heir
// whose session was ending (the heir slot still named it). The heir, going on on a new
// session, took its own key as a re-entry: two holds in the row and one in the client, so
// its release left the key held until the TTL. Here the heir's session ends after the
// handover and before the heir sees it: the release comes from another client with the
// holder's owner and token, which holds no doorbell, so nothing wakes the heir first.
TEST_F(MysqlFault, HeirWhoseSessionEndsBeforeItSeesTheHandoverHoldsTheKeyOnce) {
  Client holder_client = Client::open(table_url());
  Client releaser = Client::open(table_url());
  Client waiter_client = Client::open(table_url());
  RawConnection raw(url_);
  ASSERT_TRUE(raw.ok()) << raw.error();
  Lease held = holder_client.acquire("k", LockOptions{.ttl = 30s});
  // A TTL whose eighth (one wait of the heir) outlasts the test's steps.
  auto waiter = std::async(std::launch::async,
                           [&] { return waiter_client.try_acquire_for("k", 30s, LockOptions{.ttl = 120s}); });
  ASSERT_TRUE(eventually([&] { return !heir_of(raw, table_).empty(); }, 10s)) << "the waiter never became the heir";
  const auto heir = raw.query("SELECT heir_session FROM `" + table_ + "` WHERE name = 'k'");
  ASSERT_TRUE(heir && heir->size() == 1) << raw.error();

  EXPECT_EQ(releaser.release("k", held.owner(), held.token()), 0U);
  held.detach();
  ASSERT_TRUE(raw.query("KILL CONNECTION " + heir->at(0).at(0))) << raw.error();

  ASSERT_EQ(waiter.wait_for(20s), std::future_status::ready) << "the heir did not get the key handed to it";
  Attempt attempt = waiter.get();
  ASSERT_TRUE(attempt) << "the heir gave up";
  EXPECT_EQ(attempt.lease().token(), held.token() + 1);
  const auto seen = sole_holder(releaser.inspect("k"));
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->owner, attempt.lease().owner());
  EXPECT_EQ(seen->hold_count, 1U) << "the handover was counted as a re-entry";
  attempt.lease().release();
  const auto left = sole_holder(releaser.inspect("k"));
  EXPECT_FALSE(left) << "the heir's release left the key held, " << left->hold_count << " holds";
}

// KILL CONNECTION for the session of `raw`'s user running a statement that starts with
// `statement`, once one does (an attempt waiting for a lock the test holds). False if none
// did within 10 s.
bool kill_session_running(RawConnection& raw, const std::string& statement) {
  std::string id;
  const bool found = eventually(
      [&] {
        const auto rows = raw.query("SELECT id FROM information_schema.PROCESSLIST WHERE info LIKE '" + statement +
                                    "%' AND id <> CONNECTION_ID()");
        if (rows && !rows->empty()) id = rows->at(0).at(0);
        return !id.empty();
      },
      10s);
  return found && raw.query("KILL CONNECTION " + id).has_value();
}

// The waiter of `waiter` gets the key after the holder's release (token `token`), with one
// hold, and its release frees it: it did not end when its attempt was killed.
void expect_waiter_took_over(std::future<Attempt>& waiter, std::uint64_t token, Client& client) {
  ASSERT_EQ(waiter.wait_for(20s), std::future_status::ready) << "the waiter did not get the released key";
  try {
    Attempt attempt = waiter.get();
    ASSERT_TRUE(attempt) << "the waiter gave up";
    EXPECT_EQ(attempt.lease().token(), token + 1);
    EXPECT_EQ(attempt.lease().hold_count(), 1U);
    attempt.lease().release();
  } catch (const Error& e) {
    FAIL() << "the waiting call ended when its attempt was killed: " << e.what();
  }
  EXPECT_TRUE(client.inspect("k").empty()) << "the waiter's release left the key held";
}

// Defect: the server ending a waiter's session during an attempt, not during a wait (a KILL
// of every session of the user lands on whichever statement runs), ended the waiting call
// with OutcomeUnknownError. The waiter goes on waiting: the attempt is made again on a new
// session. Here the attempt waits for the token floor, which the test keeps locked, while it
// is killed.
TEST_F(MysqlFault, WaiterWhoseAttemptIsKilledGoesOnWaiting) {
  Client holder_client = Client::open(table_url());
  Client waiter_client = Client::open(table_url());
  RawConnection raw(url_);
  ASSERT_TRUE(raw.ok()) << raw.error();
  Lease held = holder_client.acquire("k", LockOptions{.ttl = 30s});
  // A TTL of 2 s: one wait of the heir lasts 250 ms, then it makes an attempt.
  auto waiter = std::async(std::launch::async, [&] {
    return waiter_client.try_acquire_for("k", 30s, LockOptions{.ttl = 2s, .auto_renew = true});
  });
  ASSERT_TRUE(eventually([&] { return !heir_of(raw, table_).empty(); }, 10s)) << "the waiter never became the heir";
  ASSERT_TRUE(raw.query("START TRANSACTION")) << raw.error();
  ASSERT_TRUE(raw.query("SELECT v FROM `" + table_ + "_seq` WHERE id = 0 FOR UPDATE")) << raw.error();
  ASSERT_TRUE(kill_session_running(raw, "INSERT INTO `" + table_ + "` (")) << "the waiter made no attempt";
  ASSERT_TRUE(raw.query("COMMIT")) << raw.error();
  held.release();
  expect_waiter_took_over(waiter, held.token(), holder_client);
}

// The same in row mode, where the waiter sleeps on the doorbell alone: its attempt at the end
// of the holder's lease waits for the row, which the test keeps locked, while it is killed.
TEST_F(MysqlFault, RowModeWaiterWhoseAttemptIsKilledGoesOnWaiting) {
  const std::string url = row_url({"k"});
  Client holder_client = Client::open(url);
  Client waiter_client = Client::open(url);
  RawConnection raw(url_);
  ASSERT_TRUE(raw.ok()) << raw.error();
  Lease held = holder_client.acquire("k", LockOptions{.ttl = 5s});
  auto waiter = std::async(std::launch::async, [&] { return waiter_client.try_acquire_for("k", 30s); });
  ASSERT_TRUE(eventually(
      [&] {
        const auto rows = raw.query("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE state = 'User lock'");
        return rows && !rows->empty() && rows->at(0).at(0) != "0";
      },
      10s))
      << "the waiter never slept on the doorbell";
  ASSERT_TRUE(raw.query("START TRANSACTION")) << raw.error();
  ASSERT_TRUE(raw.query("SELECT id FROM `" + table_ + "` WHERE id = 'k' FOR UPDATE")) << raw.error();
  ASSERT_TRUE(kill_session_running(raw, "UPDATE `" + table_ + "` SET")) << "the waiter made no attempt";
  ASSERT_TRUE(raw.query("COMMIT")) << raw.error();
  held.detach();  // its lease has run out: the waiter took the key over
  expect_waiter_took_over(waiter, held.token(), holder_client);
}

// ---- A release that comes too late ----

// The key's doorbell (src/backends/mysql/common.cpp, bell_name): a GET_LOCK named after the
// database, the table and the key.
std::string bell_of(const std::string& url, const std::string& table, const std::string& key) {
  char hex[17];
  const std::string scope = UrlParts::parse(url).database + "." + table + ":" + key;
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(core::stable_hash(scope)));
  return std::string("dlock:") + hex;
}

// Defect: the release of an acquisition whose lease had run out, after its owner took the key
// again, forgot the connection of the newer acquisition and gave up that one's doorbell
// (the session keeping it), so its release rang nobody. Lease and row mode keep a doorbell
// beside the lock.
void late_release_keeps_the_newer_doorbell(const std::string& url, const std::string& table) {
  Client client = Client::open(url);
  Lease earlier = client.acquire("k", LockOptions{.ttl = 1s, .owner = "script"});
  ASSERT_TRUE(eventually([&] { return client.inspect("k").empty(); }, 10s)) << "the lease never ran out";
  Lease newer = client.acquire("k", LockOptions{.ttl = 30s, .owner = "script"});
  ASSERT_GT(newer.token(), earlier.token());
  const std::string holds_bell = "SELECT IS_USED_LOCK('" + bell_of(url, table, "k") + "')";
  const auto keeper = test::select_rows(url, holds_bell);
  ASSERT_TRUE(keeper.size() == 1 && keeper[0][0]) << "no session keeps the doorbell of the newer acquisition";

  EXPECT_THROW(earlier.release(), LockLostError);
  const auto after = test::select_rows(url, holds_bell);
  ASSERT_EQ(after.size(), 1U);
  EXPECT_EQ(after[0][0], keeper[0][0]) << "the late release gave up the newer acquisition's doorbell";
  newer.release();
  EXPECT_FALSE(test::select_rows(url, holds_bell).at(0).at(0)) << "the newer acquisition's release did not ring";
}

TEST_F(MysqlFault, LateReleaseKeepsTheNewerAcquisitionsDoorbell) {
  late_release_keeps_the_newer_doorbell(table_url(), table_);
}

TEST_F(MysqlFault, RowModeLateReleaseKeepsTheNewerAcquisitionsDoorbell) {
  late_release_keeps_the_newer_doorbell(row_url({"k"}), table_);
}

// ---- The readers' claim in session mode ----

// Defect: a waiting reader places its claim in the statement after the look that found the
// writer, and the writer's `take` did not look at the key's gate, which the reader holds
// meanwhile, so a writer that let go and took the key back in between went ahead of the reader
// once per cycle (3 holds against 2 allowed in 2 of 10 conformance runs with lock_delay). A
// writer leaves the key to a shared step under way.
TEST_F(MysqlFault, SessionModeWriterLeavesTheKeyToASharedStepUnderWay) {
  const std::string url = with_option(table_url(), "mode=session");
  Client client = Client::open(url);
  client.acquire("k", LockOptions{.ttl = 10s}).release();  // the key's row
  RawConnection step(url);
  ASSERT_TRUE(step.ok()) << step.error();
  const std::string gate = "'" + bell_of(url, table_, "k") + ":gate'";
  const auto gated = step.query("SELECT GET_LOCK(" + gate + ", 0)");
  ASSERT_TRUE(gated && gated->at(0).at(0) == "1") << step.error();
  Attempt refused = client.try_acquire("k");
  EXPECT_FALSE(refused) << "a writer took the key during a shared step";
  EXPECT_TRUE(refused.holders().empty());
  ASSERT_TRUE(step.query("SELECT RELEASE_LOCK(" + gate + ")")) << step.error();
  EXPECT_TRUE(client.try_acquire("k")) << "the key stayed closed after the step";
}

}  // namespace
}  // namespace dlock
