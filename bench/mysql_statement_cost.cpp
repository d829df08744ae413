// Server time of statement cycles, apart from any client library: each line of the input file
// is a name, " | ", then one cycle of prepared statements separated by " ;; ", run in order on
// one connection and timed as one. The lines take turns (ten rounds) so that drift between runs hits them alike;
// prints one JSON line per cycle with its p50 and p99. bench/mysql_session_statements.sql is
// the input bench/mysql.sh gives it: what session mode's cycle costs against the bare
// GET_LOCK pair, and what a cycle without a table row would cost (docs/bench.md).
//
//   g++ -O2 -std=c++20 bench/mysql_statement_cost.cpp $(pkg-config --cflags --libs libmariadb) -o cost
//   ./cost HOST PORT USER PASSWORD DATABASE FILE [CYCLES]
#include <mysql.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

constexpr int kRounds = 10;

[[noreturn]] void fail(const std::string& what, const char* error) {
  std::fprintf(stderr, "mysql_statement_cost: %s: %s\n", what.c_str(), error);
  std::exit(1);
}

std::vector<MYSQL_STMT*> prepare_cycle(MYSQL* connection, const std::string& line) {
  std::vector<MYSQL_STMT*> statements;
  for (std::size_t from = 0;;) {
    const std::size_t to = line.find(" ;; ", from);
    const std::string sql = line.substr(from, to == std::string::npos ? std::string::npos : to - from);
    MYSQL_STMT* statement = mysql_stmt_init(connection);
    if (mysql_stmt_prepare(statement, sql.data(), sql.size())) fail(sql, mysql_stmt_error(statement));
    statements.push_back(statement);
    if (to == std::string::npos) return statements;
    from = to + 4;
  }
}

void run(MYSQL_STMT* statement) {
  if (mysql_stmt_execute(statement)) fail("execute", mysql_stmt_error(statement));
  mysql_stmt_store_result(statement);
  while (mysql_stmt_fetch(statement) == 0) {
  }
  mysql_stmt_free_result(statement);
}

std::string json_escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s HOST PORT USER PASSWORD DATABASE FILE [CYCLES]\n", argv[0]);
    return 2;
  }
  const int cycles = argc > 7 ? std::atoi(argv[7]) : 10000;
  MYSQL* connection = mysql_init(nullptr);
  if (!mysql_real_connect(connection, argv[1], argv[3], argv[4], argv[5], std::atoi(argv[2]), nullptr, 0)) {
    fail("connect", mysql_error(connection));
  }
  std::ifstream in(argv[6]);
  std::vector<std::string> names, lines;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t bar = line.find(" | ");
    if (bar == std::string::npos) fail(line, "no ' | ' after the cycle's name");
    names.push_back(line.substr(0, bar));
    lines.push_back(line.substr(bar + 3));
  }
  std::vector<std::vector<MYSQL_STMT*>> prepared;
  for (const auto& line : lines) prepared.push_back(prepare_cycle(connection, line));
  std::vector<std::vector<double>> times(lines.size());
  for (int round = 0; round < kRounds; ++round) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      for (int n = 0; n < cycles / kRounds; ++n) {
        const auto start = std::chrono::steady_clock::now();
        for (MYSQL_STMT* statement : prepared[i]) run(statement);
        times[i].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      }
    }
  }
  for (std::size_t i = 0; i < lines.size(); ++i) {
    auto& t = times[i];
    std::sort(t.begin(), t.end());
    std::printf("{\"backend\":\"mysql\",\"cycle\":\"%s\",\"n\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
                json_escaped(names[i]).c_str(), t.size(), t[t.size() / 2], t[t.size() * 99 / 100]);
  }
  for (auto& cycle : prepared) {
    for (MYSQL_STMT* statement : cycle) mysql_stmt_close(statement);
  }
  mysql_close(connection);
}
