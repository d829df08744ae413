// The yardstick beside dlock's mysql:// figures: the bare server primitives on one connection,
// through prepared statements as dlock sends them. Prints one JSON line per primitive: a
// round trip, a GET_LOCK/RELEASE_LOCK pair, and one durable commit (an autocommit UPDATE of
// one InnoDB row), the floor under every lease-mode acquire and release.
//
//   g++ -O2 -std=c++20 bench/mysql_yardstick.cpp $(pkg-config --cflags --libs libmariadb) -o yardstick
//   ./yardstick HOST PORT USER PASSWORD DATABASE [ITERATIONS]
#include <mysql.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(MYSQL* mysql, const char* what) {
  std::fprintf(stderr, "yardstick: %s: %s\n", what, mysql_error(mysql));
  std::exit(1);
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

void report(const char* name, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  std::printf("{\"impl\":\"bare\",\"backend\":\"mysql\",\"primitive\":\"%s\",\"ops\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
              name, us.size(), us[us.size() / 2], us[us.size() * 99 / 100]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s HOST PORT USER PASSWORD DATABASE [ITERATIONS]\n", argv[0]);
    return 64;
  }
  const int iterations = argc > 6 ? std::atoi(argv[6]) : 20000;
  MYSQL* mysql = mysql_init(nullptr);
  if (!mysql_real_connect(mysql, argv[1], argv[3], argv[4], argv[5], static_cast<unsigned>(std::atoi(argv[2])), nullptr,
                          0)) {
    die(mysql, "connect");
  }
  MYSQL_STMT* ping = prepare(mysql, "SELECT 1");
  MYSQL_STMT* get = prepare(mysql, "SELECT GET_LOCK('dlock-yardstick', 0)");
  MYSQL_STMT* release = prepare(mysql, "SELECT RELEASE_LOCK('dlock-yardstick')");
  if (mysql_query(mysql, "CREATE TABLE IF NOT EXISTS dlock_yardstick (id INT PRIMARY KEY, v BIGINT NOT NULL) ENGINE=InnoDB") != 0 ||
      mysql_query(mysql, "INSERT IGNORE INTO dlock_yardstick VALUES (1, 0)") != 0) {
    die(mysql, "create dlock_yardstick");
  }
  MYSQL_STMT* commit = prepare(mysql, "UPDATE dlock_yardstick SET v = v + 1 WHERE id = 1");
  std::vector<double> ping_us, pair_us, commit_us;
  for (int i = 0; i < iterations + 1000; ++i) {  // the first 1000 warm up
    auto start = std::chrono::steady_clock::now();
    run(mysql, ping);
    auto mid = std::chrono::steady_clock::now();
    run(mysql, get);
    run(mysql, release);
    auto end = std::chrono::steady_clock::now();
    if (mysql_stmt_execute(commit) != 0) die(mysql, "update");
    auto committed = std::chrono::steady_clock::now();
    if (i >= 1000) {
      ping_us.push_back(std::chrono::duration<double, std::micro>(mid - start).count());
      pair_us.push_back(std::chrono::duration<double, std::micro>(end - mid).count());
      commit_us.push_back(std::chrono::duration<double, std::micro>(committed - end).count());
    }
  }
  report("SELECT 1", ping_us);
  report("GET_LOCK+RELEASE_LOCK", pair_us);
  report("UPDATE one row (a durable commit)", commit_us);
  mysql_close(mysql);
}
