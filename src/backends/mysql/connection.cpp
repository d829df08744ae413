#include "backends/mysql/connection.hpp"

#include <errmsg.h>
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace dlock::backends::mysql {
namespace {

unsigned whole_seconds(std::chrono::milliseconds d) {
  return static_cast<unsigned>(std::max<long long>(1, (d.count() + 999) / 1000));
}

// The ssl-mode in MariaDB Connector/C 3.3's options (its behaviour checked on Debian 12's 3.3,
// and pinned by tests/backends/mysql/mysql_tls_test.cpp):
// - MYSQL_OPT_SSL_ENFORCE, despite its name, only asks for TLS: a server that does not offer
//   it gets a plain connection.
// - A fingerprint to pin (MARIADB_OPT_TLS_PEER_FP) makes the library refuse a server without
//   TLS before it sends the login; an empty one pins no certificate.
// - A CA makes it verify the server's certificate chain; the name in the certificate is
//   checked only with MYSQL_OPT_SSL_VERIFY_SERVER_CERT.
// Connector/C 3.4 verifies certificates unless told not to, which only makes the modes below
// verify-identity stricter there.
void set_tls_options(MYSQL* mysql, const ConnectOptions& options) {
  if (options.ssl_mode == "disabled") return;
  const my_bool yes = 1;
  mysql_options(mysql, MYSQL_OPT_SSL_ENFORCE, &yes);
  if (options.ssl_mode == "preferred") return;
  mysql_options(mysql, MARIADB_OPT_TLS_PEER_FP, "");
  if (options.ssl_mode == "required") return;
  mysql_options(mysql, MYSQL_OPT_SSL_CA, options.ssl_ca.c_str());
  if (options.ssl_mode == "verify-identity") mysql_options(mysql, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &yes);
}

bool breaks_connection(unsigned code) {
  // A TLS connection the server closed (KILL, restart) fails with CR_SSL_CONNECTION_ERROR.
  return code == CR_SERVER_GONE_ERROR || code == CR_SERVER_LOST || code == CR_CONN_HOST_ERROR ||
         code == CR_CONNECTION_ERROR || code == CR_COMMANDS_OUT_OF_SYNC || code == CR_SSL_CONNECTION_ERROR ||
         code == 1927 /* ER_CONNECTION_KILLED */ || code == 1053 /* ER_SERVER_SHUTDOWN */;
}

}  // namespace

Connection::Connection(const ConnectOptions& options) {
  mysql_ = mysql_init(nullptr);
  if (!mysql_) throw SqlError{CR_OUT_OF_MEMORY, "out of memory", true, false};
  const unsigned connect_s = whole_seconds(options.connect_timeout);
  const unsigned read_s = whole_seconds(options.read_timeout);
  const unsigned write_s = whole_seconds(options.write_timeout);
  mysql_options(mysql_, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s);
  mysql_options(mysql_, MYSQL_OPT_READ_TIMEOUT, &read_s);
  mysql_options(mysql_, MYSQL_OPT_WRITE_TIMEOUT, &write_s);
  mysql_options(mysql_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  set_tls_options(mysql_, options);
  // Without CLIENT_FOUND_ROWS statements read "changed" row counts (0 means untouched).
  const unsigned long flags = options.found_rows ? CLIENT_FOUND_ROWS : 0;
  if (!mysql_real_connect(mysql_, options.host.c_str(), options.user.c_str(), options.password.c_str(),
                          options.database.c_str(), options.port, nullptr, flags)) {
    SqlError error{mysql_errno(mysql_), mysql_error(mysql_), true, false};
    error.tls_refused = error.code == CR_SSL_CONNECTION_ERROR;
    mysql_close(mysql_);
    throw error;
  }
  // The empty pin above is how 3.3 behaves, not what it documents: a library that logs in
  // without TLS all the same is not used.
  if (options.ssl_mode != "disabled" && options.ssl_mode != "preferred" && !mysql_get_ssl_cipher(mysql_)) {
    mysql_close(mysql_);
    throw SqlError{CR_SSL_CONNECTION_ERROR, "the connection is not encrypted", true, false, true};
  }
  // Connector/C opens its socket inheritable: a command the program execs (dlock run's) would
  // get an authenticated session, and in session mode keep the lock alive after dlock ends.
  const int socket = static_cast<int>(mysql_get_socket(mysql_));
  const int fd_flags = socket >= 0 ? ::fcntl(socket, F_GETFD) : -1;
  if (fd_flags < 0 || ::fcntl(socket, F_SETFD, fd_flags | FD_CLOEXEC) != 0) {
    SqlError error{CR_UNKNOWN_ERROR, std::string("cannot make the connection's socket close-on-exec: ") +
                                         std::strerror(errno)};
    mysql_close(mysql_);
    throw error;
  }
  id_ = mysql_thread_id(mysql_);
  static std::atomic<std::uint64_t> next_serial{0};
  serial_ = ++next_serial;
  // Read committed: an acquire reads the token floor without locking it, and no gap locks
  // turn concurrent first acquisitions of new keys into deadlocks.
  run("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
  // TIMESTAMP columns (row mode) then store and compare in UTC, as UTC_TIMESTAMP() reads.
  run("SET time_zone = '+00:00'");
}

Connection::~Connection() {
  for (auto& [sql, statement] : statements_) mysql_stmt_close(statement);
  mysql_close(mysql_);
}

int Connection::socket() const noexcept { return static_cast<int>(mysql_get_socket(mysql_)); }

bool Connection::still_open() noexcept {
  // An idle session has nothing to read: anything readable is the server's goodbye (an error
  // packet, or the end of the stream).
  pollfd socket{this->socket(), POLLIN | POLLRDHUP, 0};
  if (socket.fd >= 0 && ::poll(&socket, 1, 0) == 0) return true;
  broken_ = true;
  return false;
}

void Connection::run(const std::string& sql) {
  if (mysql_real_query(mysql_, sql.data(), sql.size()) != 0) fail_connection(true);
  if (MYSQL_RES* result = mysql_store_result(mysql_)) mysql_free_result(result);
}

MYSQL_STMT* Connection::prepared(const std::string& sql) {
  if (auto it = statements_.find(sql); it != statements_.end()) return it->second;
  MYSQL_STMT* statement = mysql_stmt_init(mysql_);
  if (!statement) fail_connection(false);
  if (mysql_stmt_prepare(statement, sql.data(), sql.size()) != 0) {
    SqlError error{mysql_stmt_errno(statement), mysql_stmt_error(statement)};
    mysql_stmt_close(statement);
    error.connection_broken = breaks_connection(error.code);
    broken_ = broken_ || error.connection_broken;
    throw error;
  }
  statements_.emplace(sql, statement);
  return statement;
}

void Connection::bind_and_execute(MYSQL_STMT* statement, std::initializer_list<Param> params) {
  std::vector<MYSQL_BIND> binds(params.size());
  std::vector<unsigned long> lengths(params.size());
  std::size_t i = 0;
  for (const Param& p : params) {
    MYSQL_BIND& b = binds[i];
    std::memset(&b, 0, sizeof b);
    if (p.is_number) {
      b.buffer_type = MYSQL_TYPE_LONGLONG;
      b.buffer = const_cast<std::int64_t*>(&p.number);
    } else {
      lengths[i] = p.text.size();
      b.buffer_type = MYSQL_TYPE_STRING;
      b.buffer = const_cast<char*>(p.text.empty() ? "" : p.text.data());
      b.buffer_length = lengths[i];
      b.length = &lengths[i];
    }
    ++i;
  }
  // The library keeps pointers to the lengths and the texts: execute while they live.
  if (mysql_stmt_bind_param(statement, binds.data()) != 0) fail_statement(statement, false);
  if (mysql_stmt_execute(statement) != 0) fail_statement(statement, true);
}

Outcome Connection::execute(const std::string& sql, std::initializer_list<Param> params) {
  MYSQL_STMT* statement = prepared(sql);
  bind_and_execute(statement, params);
  return Outcome{mysql_stmt_affected_rows(statement), mysql_stmt_insert_id(statement)};
}

std::vector<Row> Connection::query(const std::string& sql, std::initializer_list<Param> params) {
  MYSQL_STMT* statement = prepared(sql);
  bind_and_execute(statement, params);
  const unsigned columns = mysql_stmt_field_count(statement);
  std::vector<MYSQL_BIND> results(columns);
  std::vector<std::string> buffers(columns, std::string(256, '\0'));
  std::vector<unsigned long> lengths(columns);
  std::vector<my_bool> nulls(columns);
  for (unsigned c = 0; c < columns; ++c) {
    std::memset(&results[c], 0, sizeof results[c]);
    results[c].buffer_type = MYSQL_TYPE_STRING;
    results[c].buffer = buffers[c].data();
    results[c].buffer_length = buffers[c].size();
    results[c].length = &lengths[c];
    results[c].is_null = &nulls[c];
  }
  if (mysql_stmt_bind_result(statement, results.data()) != 0) fail_statement(statement, true);
  std::vector<Row> rows;
  for (;;) {
    const int rc = mysql_stmt_fetch(statement);
    if (rc == MYSQL_NO_DATA) break;
    if (rc == 1) fail_statement(statement, true);
    Row row(columns);
    for (unsigned c = 0; c < columns; ++c) {
      if (nulls[c]) continue;
      std::string value(lengths[c], '\0');
      if (lengths[c] <= buffers[c].size()) {
        std::memcpy(value.data(), buffers[c].data(), lengths[c]);
      } else {  // longer than the buffer (MYSQL_DATA_TRUNCATED): fetch the whole column
        MYSQL_BIND whole{};
        whole.buffer_type = MYSQL_TYPE_STRING;
        whole.buffer = value.data();
        whole.buffer_length = value.size();
        if (mysql_stmt_fetch_column(statement, &whole, c, 0) != 0) fail_statement(statement, true);
      }
      row[c] = std::move(value);
    }
    rows.push_back(std::move(row));
  }
  mysql_stmt_free_result(statement);
  return rows;
}

void Connection::fail_statement(MYSQL_STMT* statement, bool sent) {
  const unsigned code = mysql_stmt_errno(statement);
  if (!breaks_connection(code)) mysql_stmt_reset(statement);
  fail(code, mysql_stmt_error(statement), sent);
}

void Connection::fail_connection(bool sent) { fail(mysql_errno(mysql_), mysql_error(mysql_), sent); }

void Connection::fail(unsigned code, const char* message, bool sent) {
  SqlError error{code, *message || code != CR_SSL_CONNECTION_ERROR ? message : "the TLS connection broke"};
  error.connection_broken = breaks_connection(code);
  // Gone before the request left ("server has gone away" on write) changed nothing; a
  // connection lost while waiting for the answer may have run it.
  error.maybe_applied = sent && error.connection_broken && code != CR_SERVER_GONE_ERROR;
  broken_ = broken_ || error.connection_broken;
  throw error;
}

}  // namespace dlock::backends::mysql
