// The yardstick for PostgreSQL (issue 19): the bare server primitives a lock on PostgreSQL is
// built from, through libpq's prepared statements. Prints one JSON line per primitive:
//   - on one connection: a round trip (`SELECT 1`), a pg_advisory_lock/pg_advisory_unlock
//     pair (session-level advisory lock: the floor under a session-mode acquire and release),
//     and one durable commit (an autocommit UPDATE of one row, the WAL flushed before the
//     answer: the floor under every lease-mode acquire and release); and the same pair with
//     a one-row UPDATE of an UNLOGGED table in each statement (no durable write: the floor of
//     a session-mode lock that records its holder and counts its tokens in the server);
//   - between two connections, from the sending of pg_advisory_unlock to the answer of the
//     other connection's pg_advisory_lock, which was blocked on it: the server's own wake-up,
//     the floor of a session-mode handoff.
//
//   g++ -O2 -std=c++20 -I/usr/include/postgresql bench/postgres_yardstick.cpp -lpq -o yardstick
//   ./yardstick 'postgres://USER:PASSWORD@HOST:PORT/DB' [ITERATIONS]
#include <libpq-fe.h>

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

[[noreturn]] void die(PGconn* connection, const char* what) {
  std::fprintf(stderr, "yardstick: %s: %s\n", what, PQerrorMessage(connection));
  std::exit(1);
}

PGconn* connect(const char* url) {
  PGconn* connection = PQconnectdb(url);
  if (PQstatus(connection) != CONNECTION_OK) die(connection, "connect");
  return connection;
}

void prepare(PGconn* connection, const char* name, const char* sql) {
  PGresult* result = PQprepare(connection, name, sql, 0, nullptr);
  if (PQresultStatus(result) != PGRES_COMMAND_OK) die(connection, sql);
  PQclear(result);
}

// Executes a prepared statement without parameters and drops its result.
void run(PGconn* connection, const char* name) {
  PGresult* result = PQexecPrepared(connection, name, 0, nullptr, nullptr, nullptr, 0);
  const auto status = PQresultStatus(result);
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) die(connection, name);
  PQclear(result);
}

double us_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

void report(const char* name, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  std::printf(
      "{\"impl\":\"bare\",\"backend\":\"postgres\",\"primitive\":\"%s\",\"ops\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
      name, us.size(), us[us.size() / 2], us[us.size() * 99 / 100]);
  std::fflush(stdout);
}

constexpr long long kWakeLock = 0x646c6f636b01;  // the wake-up's advisory lock id

// `releaser` holds the advisory lock; a waiter thread blocks in pg_advisory_lock on its own
// connection, and the releaser unlocks. The microseconds from the unlock's sending to the
// waiter's answer, once per iteration.
std::vector<double> wake_ups(const char* url, int iterations) {
  PGconn* releaser = connect(url);
  PGconn* waiter = connect(url);
  const std::string id = std::to_string(kWakeLock);
  prepare(releaser, "take", ("SELECT pg_advisory_lock(" + id + ")").c_str());
  prepare(releaser, "ring", ("SELECT pg_advisory_unlock(" + id + ")").c_str());
  prepare(waiter, "wait", ("SELECT pg_advisory_lock(" + id + ")").c_str());
  prepare(waiter, "give_back", ("SELECT pg_advisory_unlock(" + id + ")").c_str());
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    run(releaser, "take");
    std::atomic<bool> sent{false};
    Clock::time_point answered;
    std::thread blocked([&] {
      sent = true;
      run(waiter, "wait");
      answered = Clock::now();
      run(waiter, "give_back");
    });
    while (!sent) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the waiter is blocked by now
    const auto released = Clock::now();
    run(releaser, "ring");
    blocked.join();
    us.push_back(us_between(released, answered));
  }
  PQfinish(releaser);
  PQfinish(waiter);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s postgres://USER:PASSWORD@HOST:PORT/DB [ITERATIONS]\n", argv[0]);
    return 64;
  }
  const char* url = argv[1];
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20000;
  PGconn* connection = connect(url);
  PGresult* made = PQexec(connection,
                          "CREATE TABLE IF NOT EXISTS dlock_yardstick (id INT PRIMARY KEY, v BIGINT NOT NULL);"
                          "INSERT INTO dlock_yardstick VALUES (1, 0) ON CONFLICT DO NOTHING;"
                          "CREATE UNLOGGED TABLE IF NOT EXISTS dlock_yardstick_unlogged (id INT PRIMARY KEY, v BIGINT NOT NULL);"
                          "INSERT INTO dlock_yardstick_unlogged VALUES (1, 0) ON CONFLICT DO NOTHING");
  if (PQresultStatus(made) != PGRES_COMMAND_OK) die(connection, "create dlock_yardstick");
  PQclear(made);
  prepare(connection, "ping", "SELECT 1");
  prepare(connection, "lock", "SELECT pg_advisory_lock(7306090852)");
  prepare(connection, "unlock", "SELECT pg_advisory_unlock(7306090852)");
  prepare(connection, "commit", "UPDATE dlock_yardstick SET v = v + 1 WHERE id = 1");
  prepare(connection, "lock_row",
          "WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock(7306090852) AS got) "
          "UPDATE dlock_yardstick_unlogged SET v = v + 1 FROM l WHERE l.got AND id = 1");
  prepare(connection, "unlock_row",
          "UPDATE dlock_yardstick_unlogged SET v = v + 1 WHERE id = 1 RETURNING pg_advisory_unlock(7306090852)");
  std::vector<double> ping_us, pair_us, commit_us, row_pair_us;
  for (int i = 0; i < iterations + 1000; ++i) {  // the first 1000 warm up
    const auto start = Clock::now();
    run(connection, "ping");
    const auto mid = Clock::now();
    run(connection, "lock");
    run(connection, "unlock");
    const auto end = Clock::now();
    run(connection, "commit");
    const auto committed = Clock::now();
    run(connection, "lock_row");
    run(connection, "unlock_row");
    const auto rows_done = Clock::now();
    if (i >= 1000) {
      ping_us.push_back(us_between(start, mid));
      pair_us.push_back(us_between(mid, end));
      commit_us.push_back(us_between(end, committed));
      row_pair_us.push_back(us_between(committed, rows_done));
    }
  }
  report("SELECT 1", ping_us);
  report("pg_advisory_lock+pg_advisory_unlock", pair_us);
  report("UPDATE one row (a durable commit)", commit_us);
  report("pg_advisory_lock+pg_advisory_unlock, each with an unlogged one-row UPDATE", row_pair_us);

  // Each wake-up costs a millisecond of set-up: a tenth of the iterations is plenty.
  auto wakes = wake_ups(url, std::max(200, iterations / 10));
  report("advisory lock wake-up (unlock sent to waiter answered)", wakes);
  PQfinish(connection);
}
