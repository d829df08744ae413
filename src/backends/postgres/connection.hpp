#pragma once

// One libpq session with its prepared statements. Used by one thread at a time (pool.hpp hands
// connections out).

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlock::backends::postgres {

struct ConnectOptions {
  std::string host;
  std::uint16_t port = 5432;
  std::string user;
  std::string password;
  std::string database;
  std::string sslmode = "prefer";  // as libpq means it: disable, allow, prefer, require, verify-ca, verify-full
  std::string sslrootcert;         // verify-ca and verify-full: the CA certificates (PEM)
  std::chrono::milliseconds connect_timeout{5'000};
  // How long a statement may go unanswered before its connection is given up (a partition, a
  // hung server); a waiter's wait in the server is not bound by it.
  std::chrono::milliseconds read_timeout{30'000};
  std::string redacted_url;  // for messages: the URL without its password
};

// A result row: every column as text, NULL as nullopt.
using Row = std::vector<std::optional<std::string>>;

// A statement's parameter: text, or NULL.
using Param = std::optional<std::string_view>;

// Thrown for a failed statement or connection. `sqlstate` is the server's code ("" when the
// connection failed before the server answered); `maybe_applied` says whether the statement may
// have taken effect (the connection broke after it was sent).
struct PgError {
  std::string sqlstate;
  std::string message;
  bool connection_broken = false;
  bool maybe_applied = false;
};

class Connection {
 public:
  // Connects; throws PgError.
  explicit Connection(const ConnectOptions& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs a prepared statement (prepared once per connection, by its text) and returns its rows.
  // Throws PgError.
  std::vector<Row> query(const std::string& sql, std::initializer_list<Param> params);
  // Statements without parameters, in one round trip (DDL, LISTEN, a transaction's BEGIN).
  void run(const std::string& sql);

  // A prepared statement sent without waiting for its answer (a wait inside the server);
  // finish_sent() collects it. Throws PgError.
  void send(const std::string& sql, std::initializer_list<Param> params);
  // Waits for the answer to send() until `deadline`; nothing when the deadline came first (the
  // statement goes on in the server, and a later call collects it).
  std::optional<std::vector<Row>> finish_sent(std::chrono::steady_clock::time_point deadline);

  // Waits for a notification (LISTEN) until `deadline`: true when one came, or one had come
  // since the last call. Throws PgError when the connection breaks.
  bool wait_for_notification(std::chrono::steady_clock::time_point deadline);
  // Drops the notifications received so far.
  void drop_notifications();

  bool broken() const noexcept { return broken_; }
  // Never to be reused: the pool closes it, and the server drops what the session held.
  void discard() noexcept { broken_ = true; }
  // Asks the server to cancel the statement this connection sent (a wait for a lock, which the
  // server would otherwise keep queued after the connection closes), then discards it.
  void cancel_and_discard() noexcept;
  // For a connection idle in the pool: false when the server closed it meanwhile. Looks at the
  // socket only; no round trip.
  bool still_open() noexcept;
  // The server process of this session (pg_backend_pid(); what pg_terminate_backend takes).
  int backend_pid() const noexcept { return PQbackendPID(conn_); }
  // A random number naming this connection (and no other, ever) in session mode's rows: a
  // server process id may come back for another connection.
  std::int64_t tag() const noexcept { return tag_; }

 private:
  const char* prepared(const std::string& sql);
  std::vector<Row> rows_of(PGresult* result, bool sent);
  // Waits until the socket is readable or the deadline; false at the deadline.
  bool wait_readable(std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void fail(PGresult* result, bool sent);

  std::chrono::milliseconds read_timeout_;
  std::int64_t tag_;
  PGconn* conn_ = nullptr;
  bool broken_ = false;
  std::unordered_map<std::string, std::string> statements_;  // SQL text -> prepared name
};

}  // namespace dlock::backends::postgres
