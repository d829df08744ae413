// The yardstick beside dlock's mysql:// figures: the bare server primitives, through prepared
// statements as dlock sends them. Prints one JSON line per primitive:
//   - on one connection: a round trip (`SELECT 1`), a GET_LOCK/RELEASE_LOCK pair, and one
//     durable commit (an autocommit UPDATE of one InnoDB row), the floor under every
//     lease-mode acquire and release;
//   - between two connections, from the sending of a release to the waiter's answer: a bare
//     GET_LOCK wake-up, and the same behind a committed UPDATE that rings the lock and whose
//     commit the waiter's locking read of the row waits for (the floor of lease mode's
//     handoff, src/backends/mysql/README.md).
//
//   g++ -O2 -std=c++20 bench/mysql_yardstick.cpp $(pkg-config --cflags --libs libmariadb) -o yardstick
//   ./yardstick HOST PORT USER PASSWORD DATABASE [ITERATIONS]
#include <mysql.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(MYSQL* mysql, const char* what) {
  std::fprintf(stderr, "yardstick: %s: %s\n", what, mysql_error(mysql));
  std::exit(1);
}

MYSQL* connect(char** argv) {
  MYSQL* mysql = mysql_init(nullptr);
  if (!mysql_real_connect(mysql, argv[1], argv[3], argv[4], argv[5],
                          static_cast<unsigned>(std::atoi(argv[2])), nullptr, 0)) {
    die(mysql, "connect");
  }
  return mysql;
}

// Executes a prepared statement without parameters and drains its result.
void run(MYSQL* mysql, MYSQL_STMT* statement) {
  if (mysql_stmt_execute(statement) != 0 || mysql_stmt_store_result(statement) != 0) die(mysql, "execute");
  while (mysql_stmt_fetch(statement) == 0) {
  }
  mysql_stmt_free_result(statement);
}

MYSQL_STMT* prepare(MYSQL* mysql, const std::string& sql) {
  MYSQL_STMT* statement = mysql_stmt_init(mysql);
  if (!statement || mysql_stmt_prepare(statement, sql.data(), sql.size()) != 0) die(mysql, sql.c_str());
  return statement;
}

double us_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

void report(const char* name, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  std::printf(
      "{\"impl\":\"bare\",\"backend\":\"mysql\",\"primitive\":\"%s\",\"ops\":%zu,\"p50_us\":%.1f,\"p99_us\":%"
      ".1f}\n",
      name, us.size(), us[us.size() / 2], us[us.size() * 99 / 100]);
  std::fflush(stdout);
}

// `releaser` holds the lock 'dlock-yardstick-wake'; a waiter thread blocks on it with
// `wait_sql` on its own connection, and `release_sql` frees it. Returns the microseconds from
// the release's sending to the waiter's answer, once per iteration.
std::vector<double> wake_ups(char** argv, int iterations, const char* wait_sql, const char* release_sql) {
  MYSQL* releaser = connect(argv);
  MYSQL* waiter = connect(argv);
  MYSQL_STMT* take = prepare(releaser, "SELECT GET_LOCK('dlock-yardstick-wake', 0)");
  MYSQL_STMT* ring = prepare(releaser, release_sql);
  MYSQL_STMT* wait = prepare(waiter, wait_sql);
  MYSQL_STMT* give_back = prepare(waiter, "SELECT RELEASE_LOCK('dlock-yardstick-wake')");
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    run(releaser, take);
    std::atomic<bool> sent{false};
    Clock::time_point answered;
    std::thread blocked([&] {
      sent = true;
      run(waiter, wait);
      answered = Clock::now();
      run(waiter, give_back);
    });
    while (!sent) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the waiter is blocked by now
    const auto released = Clock::now();
    run(releaser, ring);
    blocked.join();
    us.push_back(us_between(released, answered));
  }
  mysql_stmt_close(take);
  mysql_stmt_close(ring);
  mysql_stmt_close(wait);
  mysql_stmt_close(give_back);
  mysql_close(releaser);
  mysql_close(waiter);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s HOST PORT USER PASSWORD DATABASE [ITERATIONS]\n", argv[0]);
    return 64;
  }
  const int iterations = argc > 6 ? std::atoi(argv[6]) : 20000;
  MYSQL* mysql = connect(argv);
  MYSQL_STMT* ping = prepare(mysql, "SELECT 1");
  MYSQL_STMT* get = prepare(mysql, "SELECT GET_LOCK('dlock-yardstick', 0)");
  MYSQL_STMT* release = prepare(mysql, "SELECT RELEASE_LOCK('dlock-yardstick')");
  if (mysql_query(mysql,
                  "CREATE TABLE IF NOT EXISTS dlock_yardstick (id INT PRIMARY KEY, v BIGINT NOT NULL) "
                  "ENGINE=InnoDB") != 0 ||
      mysql_query(mysql, "INSERT IGNORE INTO dlock_yardstick VALUES (1, 0)") != 0) {
    die(mysql, "create dlock_yardstick");
  }
  MYSQL_STMT* commit = prepare(mysql, "UPDATE dlock_yardstick SET v = v + 1 WHERE id = 1");
  std::vector<double> ping_us, pair_us, commit_us;
  for (int i = 0; i < iterations + 1000; ++i) {  // the first 1000 warm up
    const auto start = Clock::now();
    run(mysql, ping);
    const auto mid = Clock::now();
    run(mysql, get);
    run(mysql, release);
    const auto end = Clock::now();
    if (mysql_stmt_execute(commit) != 0) die(mysql, "update");
    const auto committed = Clock::now();
    if (i >= 1000) {
      ping_us.push_back(us_between(start, mid));
      pair_us.push_back(us_between(mid, end));
      commit_us.push_back(us_between(end, committed));
    }
  }
  report("SELECT 1", ping_us);
  report("GET_LOCK+RELEASE_LOCK", pair_us);
  report("UPDATE one row (a durable commit)", commit_us);

  // Each wake-up costs a millisecond of set-up: a tenth of the iterations is plenty.
  const int wakes = std::max(200, iterations / 10);
  auto bare = wake_ups(argv, wakes, "SELECT GET_LOCK('dlock-yardstick-wake', 10)",
                       "SELECT RELEASE_LOCK('dlock-yardstick-wake')");
  report("GET_LOCK wake-up (release sent to waiter answered)", bare);
  auto behind_commit = wake_ups(
      argv, wakes,
      "SELECT w.rang, t.v FROM (SELECT GET_LOCK('dlock-yardstick-wake', 10) AS rang LIMIT 1) AS w"
      " LEFT JOIN dlock_yardstick AS t ON t.id = 1 LOCK IN SHARE MODE",
      "UPDATE dlock_yardstick SET v = v + 1 + 0 * RELEASE_LOCK('dlock-yardstick-wake') WHERE id = 1");
  report("GET_LOCK wake-up behind a committed UPDATE (the handoff's floor)", behind_commit);
  mysql_stmt_close(ping);
  mysql_stmt_close(get);
  mysql_stmt_close(release);
  mysql_stmt_close(commit);
  mysql_close(mysql);
}
