#include "support/mysql_rows.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "backends/mysql/connection.hpp"
#include "core/url.hpp"

namespace dlock::test {
namespace {

// One connection per server, shared by the tests of this process.
backends::mysql::Connection& connection_for(const std::string& url_text, std::unique_lock<std::mutex>& lock) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<backends::mysql::Connection>> connections;
  lock = std::unique_lock(mutex);
  const auto url = core::Url::parse(url_text);
  backends::mysql::ConnectOptions options;
  options.host = url.host;
  options.port = url.port.value_or(3306);
  options.user = url.user;
  options.password = url.password;
  options.database = url.path.substr(1);
  const std::string id = options.user + "@" + options.host + ":" + std::to_string(options.port) + "/" + options.database;
  auto& connection = connections[id];
  if (!connection || connection->broken()) connection = std::make_unique<backends::mysql::Connection>(options);
  return *connection;
}

// Runs `f` on the shared connection, once more on a new one if the server had closed it
// (a restart or KILL by a fault test).
template <class F>
void with_connection(const std::string& url, F&& f) {
  for (int attempt = 0;; ++attempt) {
    std::unique_lock<std::mutex> lock;
    try {
      f(connection_for(url, lock));
      return;
    } catch (const backends::mysql::SqlError& e) {
      if (!e.connection_broken || attempt > 0) {
        throw std::runtime_error("MySQL error " + std::to_string(e.code) + ": " + e.message);
      }
    }
  }
}

}  // namespace

void create_row_table(const std::string& url, const std::string& table) {
  with_connection(url, [&](backends::mysql::Connection& c) {
    // The seed's resource table: the lock columns live beside the resource's own data.
    c.run("CREATE TABLE IF NOT EXISTS `" + table +
          "` (id VARBINARY(1024) NOT NULL PRIMARY KEY, data VARCHAR(64) NOT NULL DEFAULT '',"
          " lock_owner VARCHAR(128) NOT NULL DEFAULT '', lock_expire_time DATETIME(3) NULL,"
          " version BIGINT UNSIGNED NOT NULL DEFAULT 0, lock_holds INT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB");
  });
}

void insert_row(const std::string& url, const std::string& table, const std::string& key) {
  with_connection(url, [&](backends::mysql::Connection& c) {
    c.execute("INSERT IGNORE INTO `" + table + "` (id) VALUES (?)", {key});
  });
}

void drop_tables(const std::string& url, std::initializer_list<std::string> tables) {
  for (const std::string& table : tables) run_statement(url, "DROP TABLE IF EXISTS `" + table + "`");
}

std::vector<std::vector<std::optional<std::string>>> select_rows(const std::string& url, const std::string& sql) {
  std::vector<backends::mysql::Row> rows;
  with_connection(url, [&](backends::mysql::Connection& c) { rows = c.query(sql, {}); });
  return rows;
}

void run_statement(const std::string& url, const std::string& sql) {
  with_connection(url, [&](backends::mysql::Connection& c) { c.run(sql); });
}

}  // namespace dlock::test
