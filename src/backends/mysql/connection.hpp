#pragma once

// One MariaDB Connector/C session with its prepared statements. Used by one thread at a time
// (pool.hpp hands connections out).

#include <mysql.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlock::backends::mysql {

struct ConnectOptions {
  std::string host;
  std::uint16_t port = 3306;
  std::string user;
  std::string password;
  std::string database;
  std::chrono::milliseconds connect_timeout{5'000};
  std::chrono::milliseconds read_timeout{30'000};
  std::chrono::milliseconds write_timeout{30'000};
  // As MySQL's client means them: disabled never encrypts; preferred encrypts when the server
  // offers TLS; required refuses a server without TLS before logging in, and checks no
  // certificate; verify-ca also checks the server's certificate against `ssl_ca`, but not the
  // name in it; verify-identity also checks that it names `host`.
  std::string ssl_mode = "preferred";
  std::string ssl_ca;  // CA certificates (PEM file); verify-ca and verify-identity only
  // Affected rows count matched rows, not changed ones (row mode: a renew that writes the
  // same second into a TIMESTAMP(0) column changes nothing, yet succeeded).
  bool found_rows = false;
  std::string redacted_url;  // for messages: the URL without its password
};

// A parameter of a prepared statement: text (bound as bytes) or an integer.
struct Param {
  Param(std::string_view text_) : text(text_) {}  // NOLINT(google-explicit-constructor)
  Param(const std::string& text_) : text(text_) {}  // NOLINT(google-explicit-constructor)
  Param(std::int64_t number_) : number(number_), is_number(true) {}  // NOLINT(google-explicit-constructor)
  std::string_view text;
  std::int64_t number = 0;
  bool is_number = false;
};

// The outcome of a statement: affected rows and the OK packet's insert id (LAST_INSERT_ID(x)).
struct Outcome {
  std::uint64_t affected = 0;
  std::uint64_t insert_id = 0;
};

// A result row: every column as text, NULL as nullopt.
using Row = std::vector<std::optional<std::string>>;

// Thrown for a server error; `code` is the MySQL error number, `maybe_applied` says whether
// the statement may have taken effect (the connection broke after it was sent).
struct SqlError {
  unsigned code = 0;
  std::string message;
  bool connection_broken = false;
  bool maybe_applied = false;
  // Connecting failed on TLS: the server or its certificate does not meet the ssl-mode. (The
  // same code later means only that a TLS connection broke.)
  bool tls_refused = false;
};

class Connection {
 public:
  // Connects; throws SqlError.
  explicit Connection(const ConnectOptions& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs a prepared statement (prepared once per connection, by its text). Throws SqlError.
  Outcome execute(const std::string& sql, std::initializer_list<Param> params);
  // Runs a prepared SELECT and returns its rows.
  std::vector<Row> query(const std::string& sql, std::initializer_list<Param> params);
  // A plain statement without parameters (DDL, SET).
  void run(const std::string& sql);

  bool broken() const noexcept { return broken_; }
  // For a connection idle in the pool: false when the server closed it meanwhile (killed,
  // restarted, timed out). Looks at the socket only; no round trip.
  bool still_open() noexcept;
  // The socket, for poll(); -1 when there is none.
  int socket() const noexcept;
  // The server's id of this session (CONNECTION_ID(); what KILL takes). A restarted server
  // hands the same ids out again.
  std::uint64_t id() const noexcept { return id_; }
  // Unique to this connection within the process, across server restarts.
  std::uint64_t serial() const noexcept { return serial_; }

 private:
  MYSQL_STMT* prepared(const std::string& sql);
  void bind_and_execute(MYSQL_STMT* statement, std::initializer_list<Param> params);
  [[noreturn]] void fail_statement(MYSQL_STMT* statement, bool sent);
  [[noreturn]] void fail_connection(bool sent);
  [[noreturn]] void fail(unsigned code, const char* message, bool sent);

  MYSQL* mysql_ = nullptr;
  std::uint64_t id_ = 0;
  std::uint64_t serial_ = 0;
  bool broken_ = false;
  std::unordered_map<std::string, MYSQL_STMT*> statements_;
};

}  // namespace dlock::backends::mysql
