#include "backends/postgres/connection.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <random>
#include <vector>

namespace dlock::backends::postgres {
namespace {

struct ResultDeleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

std::string trimmed(const char* message) {
  std::string text = message ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::int64_t random_tag() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return static_cast<std::int64_t>(generator() >> 1);
}

}  // namespace

Connection::Connection(const ConnectOptions& options) : read_timeout_(options.read_timeout), tag_(random_tag()) {
  const std::string port = std::to_string(options.port);
  // libpq counts whole seconds, at least 2.
  const std::string timeout = std::to_string(std::max<long long>(2, (options.connect_timeout.count() + 999) / 1000));
  std::deque<std::string> texts;  // what `values` points into
  std::vector<const char*> keys;
  std::vector<const char*> values;
  const auto set = [&](const char* key, std::string value) {
    if (value.empty()) return;
    keys.push_back(key);
    values.push_back(texts.emplace_back(std::move(value)).c_str());
  };
  set("host", options.host);
  set("port", port);
  set("user", options.user);
  set("password", options.password);
  set("dbname", options.database);
  set("sslmode", options.sslmode);
  set("sslrootcert", options.sslrootcert);
  set("connect_timeout", timeout);
  set("application_name", "dlock");
  set("client_encoding", "UTF8");  // keys and owners are UTF-8 text
  set("gssencmode", "disable");  // no Kerberos: one handshake fewer
  // A server gone without a word (a partition) is noticed within about 15 s, not at TCP's
  // retransmission limit.
  set("keepalives_idle", "5");
  set("keepalives_interval", "2");
  set("keepalives_count", "3");
  set("tcp_user_timeout", "15000");
  // Timestamps a session prints (inspect's, an operator's psql) read as UTC.
  set("options", "-c TimeZone=UTC");
  keys.push_back(nullptr);
  values.push_back(nullptr);
  conn_ = PQconnectdbParams(keys.data(), values.data(), 0);
  if (conn_ == nullptr) throw PgError{"", "out of memory", true, false};
  if (PQstatus(conn_) != CONNECTION_OK) {
    PgError e{"", trimmed(PQerrorMessage(conn_)), true, false};
    PQfinish(conn_);
    conn_ = nullptr;
    throw e;
  }
  // The server's notices (a table that already exists) are not the caller's to read on stderr.
  PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
  // No command dlock runs inherits the session.
  if (const int fd = PQsocket(conn_); fd >= 0) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

void Connection::cancel_and_discard() noexcept {
  if (PGcancel* cancel = PQgetCancel(conn_)) {
    char error[256];
    PQcancel(cancel, error, sizeof error);  // best effort: the server may be gone
    PQfreeCancel(cancel);
  }
  discard();
}

Connection::~Connection() {
  if (conn_ != nullptr) PQfinish(conn_);
}

void Connection::fail(PGresult* result, bool sent) {
  PgError e;
  if (result != nullptr) {
    const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
    e.sqlstate = state ? state : "";
    // The primary message alone: the full one quotes the statement, several lines long.
    const char* primary = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
    e.message = trimmed(primary ? primary : PQresultErrorMessage(result));
  }
  if (e.message.empty()) e.message = trimmed(PQerrorMessage(conn_));
  if (PQstatus(conn_) != CONNECTION_OK) {
    broken_ = true;
    e.connection_broken = true;
    e.maybe_applied = sent;
  }
  throw e;
}

const char* Connection::prepared(const std::string& sql) {
  if (const auto it = statements_.find(sql); it != statements_.end()) return it->second.c_str();
  const std::string name = "dlock_" + std::to_string(statements_.size() + 1);
  if (PQsendPrepare(conn_, name.c_str(), sql.c_str(), 0, nullptr) != 1) fail(nullptr, false);
  if (!finish_sent(std::chrono::steady_clock::now() + read_timeout_)) {
    broken_ = true;
    throw PgError{"", "no answer within read_timeout=" + std::to_string(read_timeout_.count()) + "ms", true, false};
  }
  return statements_.emplace(sql, name).first->second.c_str();
}

std::vector<Row> Connection::rows_of(PGresult* result_ptr, bool sent) {
  const Result result(result_ptr);
  const auto status = PQresultStatus(result.get());
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) fail(result.get(), sent);
  std::vector<Row> rows(static_cast<std::size_t>(PQntuples(result.get())));
  const int columns = PQnfields(result.get());
  for (int r = 0; r < static_cast<int>(rows.size()); ++r) {
    auto& row = rows[static_cast<std::size_t>(r)];
    row.reserve(static_cast<std::size_t>(columns));
    for (int c = 0; c < columns; ++c) {
      if (PQgetisnull(result.get(), r, c)) {
        row.emplace_back();
      } else {
        row.emplace_back(std::string(PQgetvalue(result.get(), r, c),
                                     static_cast<std::size_t>(PQgetlength(result.get(), r, c))));
      }
    }
  }
  return rows;
}

namespace {

// libpq takes text parameters as NUL-terminated strings.
struct TextParams {
  explicit TextParams(std::initializer_list<Param> params) {
    text.reserve(params.size());
    for (const auto& p : params) text.emplace_back(p ? std::optional<std::string>(std::string(*p)) : std::nullopt);
    for (const auto& t : text) values.push_back(t ? t->c_str() : nullptr);
  }
  std::vector<std::optional<std::string>> text;
  std::vector<const char*> values;
};

}  // namespace

std::vector<Row> Connection::query(const std::string& sql, std::initializer_list<Param> params) {
  send(sql, params);
  auto rows = finish_sent(std::chrono::steady_clock::now() + read_timeout_);
  if (!rows) {
    // The server may still run it: the session is given up, which ends the statement there.
    broken_ = true;
    throw PgError{"", "no answer within read_timeout=" + std::to_string(read_timeout_.count()) + "ms", true, true};
  }
  return *std::move(rows);
}

void Connection::run(const std::string& sql) {
  PGresult* last = PQexec(conn_, sql.c_str());
  rows_of(last, true);
}

void Connection::send(const std::string& sql, std::initializer_list<Param> params) {
  const char* name = prepared(sql);
  const TextParams p(params);
  if (PQsendQueryPrepared(conn_, name, static_cast<int>(p.values.size()), p.values.data(), nullptr, nullptr, 0) != 1) {
    fail(nullptr, false);
  }
}

bool Connection::wait_readable(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd fd{PQsocket(conn_), POLLIN, 0};
    const int ready = ::poll(&fd, 1, static_cast<int>(std::min<long long>(left.count(), 60'000)));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) fail(nullptr, true);
  }
}

std::optional<std::vector<Row>> Connection::finish_sent(std::chrono::steady_clock::time_point deadline) {
  while (PQisBusy(conn_)) {
    if (!wait_readable(deadline)) return std::nullopt;
    if (PQconsumeInput(conn_) != 1) fail(nullptr, true);
  }
  std::vector<Row> rows;
  bool failed = false;
  std::optional<PgError> error;
  while (PGresult* result = PQgetResult(conn_)) {
    try {
      rows = rows_of(result, true);
    } catch (const PgError& e) {
      failed = true;
      error = e;
    }
  }
  if (failed) throw *error;
  return rows;
}

bool Connection::wait_for_notification(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    if (PQconsumeInput(conn_) != 1) fail(nullptr, true);
    bool any = false;
    while (PGnotify* n = PQnotifies(conn_)) {
      any = true;
      PQfreemem(n);
    }
    if (any) return true;
    if (!wait_readable(deadline)) return false;
  }
}

void Connection::drop_notifications() {
  if (PQconsumeInput(conn_) != 1) fail(nullptr, true);
  while (PGnotify* n = PQnotifies(conn_)) PQfreemem(n);
}

bool Connection::still_open() noexcept {
  if (broken_ || PQstatus(conn_) != CONNECTION_OK) return false;
  // An idle session has nothing to read: a readable socket is the server's goodbye (or EOF).
  pollfd fd{PQsocket(conn_), POLLIN, 0};
  if (::poll(&fd, 1, 0) == 0) return true;
  char byte;
  return ::recv(fd.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
         (fd.revents & (POLLHUP | POLLERR)) == 0;
}

}  // namespace dlock::backends::postgres
