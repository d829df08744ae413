#include "backends/redis/connection.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "dlock/errors.hpp"

namespace dlock::backends::redis {
namespace {

timeval to_timeval(std::chrono::milliseconds d) {
  return timeval{static_cast<time_t>(d.count() / 1000), static_cast<suseconds_t>(d.count() % 1000 * 1000)};
}

const char* kTlsHelp =
    "rediss:// (Redis over TLS) is not supported: Debian's hiredis 0.14 has no TLS. Use redis:// on a "
    "trusted network, or a TLS tunnel (stunnel, ssh -L) with redis:// pointed at its local end";

bool starts_with(const std::string& text, std::string_view prefix) { return text.rfind(prefix, 0) == 0; }

}  // namespace

void raise(const RedisError& e, const Endpoint& endpoint, const std::string& backend, std::string_view key,
           bool writes) {
  const std::string& url = endpoint.redacted_url;
  const std::string k(key);
  if (e.connection) {
    if (e.sent && writes) {
      throw OutcomeUnknownError("Redis at " + url + " did not answer a command that may have run: " + e.message, k,
                                backend);
    }
    throw ConnectionError("cannot reach the Redis server at " + url + ": " + e.message, backend, k);
  }
  const std::string& m = e.message;
  if (starts_with(m, "WRONGPASS") || starts_with(m, "ERR AUTH") || starts_with(m, "ERR invalid password")) {
    throw ConfigurationError("Redis at " + url + " refused the user and password of the URL (" + m + ")", backend);
  }
  if (starts_with(m, "NOAUTH")) {
    throw ConfigurationError("Redis at " + url + " wants a password: redis://[user]:PASSWORD@host:port/db (" + m +
                                 ")",
                             backend);
  }
  if (starts_with(m, "NOPERM")) {
    throw ConfigurationError("the Redis user of " + url +
                                 " lacks a permission dlock needs (commands EVALSHA, SCRIPT LOAD, BLPOP, PING, "
                                 "SELECT; keys dlock:*): " + m,
                             backend);
  }
  if (starts_with(m, "ERR DB index") || starts_with(m, "ERR invalid DB index")) {
    throw ConfigurationError("Redis at " + url + " has no such database: " + m, backend);
  }
  if (starts_with(m, "READONLY")) {
    throw ConfigurationError(url + " is a read-only replica: point the URL at the primary (" + m + ")", backend);
  }
  if (starts_with(m, "LOADING")) throw ConnectionError("Redis at " + url + " is starting: " + m, backend, k);
  throw BackendError("Redis at " + url + " failed: " + m, backend, k, starts_with(m, "BUSY") || starts_with(m, "TRYAGAIN"));
}

Endpoint parse_endpoint(const core::Url& url, core::UrlOptions& options) {
  if (url.scheme == "rediss") throw ConfigurationError(std::string(kTlsHelp) + "; got " + url.redacted(), "redis");
  Endpoint e;
  e.connect_timeout = options.take_duration("connect_timeout").value_or(e.connect_timeout);
  e.command_timeout = options.take_duration("command_timeout").value_or(e.command_timeout);
  e.redacted_url = url.redacted();
  const std::string form = "redis://[user:password@]host[:port][/db]";
  if (url.host.empty() || url.host.find(',') != std::string::npos) {
    throw ConfigurationError(url.scheme + ":// needs one host: " + form + "; got " + e.redacted_url, url.scheme);
  }
  if (e.connect_timeout.count() <= 0 || e.command_timeout.count() <= 0) {
    throw ConfigurationError(url.scheme + ":// connect_timeout and command_timeout must be positive; got " +
                                 e.redacted_url,
                             url.scheme);
  }
  e.host = url.host;
  e.port = url.port.value_or(6379);
  e.user = url.user;
  e.password = url.password;
  if (url.path.size() > 1) {
    const std::string_view db = std::string_view(url.path).substr(1);
    int n = -1;
    const auto [end, ec] = std::from_chars(db.data(), db.data() + db.size(), n);
    if (ec != std::errc() || end != db.data() + db.size() || n < 0) {
      throw ConfigurationError(url.scheme + ":// database must be a number (the path of " + form + "); got '" +
                                   std::string(db) + "' in " + e.redacted_url,
                               url.scheme);
    }
    e.db = n;
  }
  return e;
}

std::string text(const redisReply* reply) {
  if (!reply) return {};
  if (reply->type == REDIS_REPLY_INTEGER) return std::to_string(reply->integer);
  if (reply->str) return std::string(reply->str, reply->len);
  return {};
}

std::int64_t integer(const redisReply* reply) {
  if (!reply) return 0;
  if (reply->type == REDIS_REPLY_INTEGER) return reply->integer;
  std::int64_t n = 0;
  if (reply->str) std::from_chars(reply->str, reply->str + reply->len, n);
  return n;
}

bool is_nil(const redisReply* reply) { return !reply || reply->type == REDIS_REPLY_NIL; }

Connection::Connection(const Endpoint& endpoint) : endpoint_(endpoint) {
  context_.reset(redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, to_timeval(endpoint.connect_timeout)));
  if (!context_) throw RedisError{"out of memory", true, false};
  if (context_->err) fail(false);
  // hiredis 0.14 opens its socket without SOCK_CLOEXEC; a command dlock runs must not inherit it.
  const int flags = ::fcntl(context_->fd, F_GETFD);
  if (flags < 0 || ::fcntl(context_->fd, F_SETFD, flags | FD_CLOEXEC) < 0) {
    throw RedisError{std::string("cannot make the socket close-on-exec: ") + std::strerror(errno), true, false};
  }
  set_timeout(endpoint.command_timeout);
  redisEnableKeepAlive(context_.get());
  std::vector<std::vector<std::string_view>> setup;
  if (!endpoint.password.empty() || !endpoint.user.empty()) {
    if (endpoint.user.empty()) {
      setup.push_back({"AUTH", endpoint.password});
    } else {
      setup.push_back({"AUTH", endpoint.user, endpoint.password});
    }
  }
  const std::string db = std::to_string(endpoint.db);
  if (endpoint.db != 0) setup.push_back({"SELECT", db});
  for (const Reply& reply : pipeline(setup)) {
    if (reply->type == REDIS_REPLY_ERROR) throw RedisError{text(reply.get()), false, false};
  }
}

void Connection::set_timeout(std::chrono::milliseconds timeout) {
  if (redisSetTimeout(context_.get(), to_timeval(timeout)) != REDIS_OK) fail(false);
}

void Connection::fail(bool sent) {
  std::string message = context_->errstr;
  if (context_->err == REDIS_ERR_IO && message == std::strerror(EAGAIN)) {
    message = "no answer within the command timeout (" + std::to_string(endpoint_.command_timeout.count()) + " ms)";
  } else if (context_->err == REDIS_ERR_EOF) {
    message = "the server closed the connection";
  }
  if (context_->err == 0) context_->err = REDIS_ERR_OTHER;  // broken from now on
  throw RedisError{message, true, sent};
}

void Connection::append(const std::vector<std::string_view>& args) {
  if (broken()) throw RedisError{"the connection broke earlier", true, false};
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  argv.reserve(args.size());
  lengths.reserve(args.size());
  for (const auto arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  if (redisAppendCommandArgv(context_.get(), static_cast<int>(args.size()), argv.data(), lengths.data()) != REDIS_OK) {
    fail(false);
  }
}

Reply Connection::read(bool throw_error_reply) {
  // Writing first: a command that could not be written in full never ran (the server runs
  // complete commands only); after it was written, the outcome is unknown.
  for (int done = 0; !done;) {
    if (redisBufferWrite(context_.get(), &done) != REDIS_OK) fail(false);
  }
  void* raw = nullptr;
  if (redisGetReply(context_.get(), &raw) != REDIS_OK || !raw) fail(true);
  Reply reply(static_cast<redisReply*>(raw));
  if (throw_error_reply && reply->type == REDIS_REPLY_ERROR) throw RedisError{text(reply.get()), false, true};
  return reply;
}

Reply Connection::command(const std::vector<std::string_view>& args) {
  append(args);
  return read(true);
}

Reply Connection::blocking(const std::vector<std::string_view>& args, std::chrono::milliseconds wait) {
  set_timeout(wait + endpoint_.command_timeout);
  append(args);
  Reply reply = read(true);
  set_timeout(endpoint_.command_timeout);
  return reply;
}

Reply Connection::next_push() {
  set_timeout(std::chrono::milliseconds(0));  // no timeout
  return read(true);
}

void Connection::interrupt() noexcept { ::shutdown(context_->fd, SHUT_RDWR); }

void Connection::send(const std::vector<std::string_view>& args) {
  append(args);
  for (int done = 0; !done;) {
    if (redisBufferWrite(context_.get(), &done) != REDIS_OK) fail(false);
  }
}

Reply Connection::receive(std::chrono::milliseconds timeout) {
  if (timeout >= endpoint_.command_timeout) return read(true);
  set_timeout(std::max(timeout, std::chrono::milliseconds(1)));
  Reply reply = read(true);
  set_timeout(endpoint_.command_timeout);
  return reply;
}

std::vector<Reply> Connection::pipeline(const std::vector<std::vector<std::string_view>>& commands) {
  for (const auto& args : commands) append(args);
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) replies.push_back(read(false));
  return replies;
}

bool Connection::still_open() const noexcept {
  if (broken()) return false;
  char byte = 0;
  const auto n = ::recv(context_->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  // Nothing to read is the only healthy state of an idle connection: 0 is the server's close,
  // and bytes nobody asked for mean the stream is out of step.
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

Pool::Lease Pool::take() {
  {
    std::lock_guard lock(mutex_);
    while (!idle_.empty()) {
      std::unique_ptr<Connection> connection = std::move(idle_.back());
      idle_.pop_back();
      if (connection->still_open()) return Lease(*this, std::move(connection));
    }
  }
  return Lease(*this, std::make_unique<Connection>(endpoint_));
}

void Pool::give_back(std::unique_ptr<Connection> connection) {
  if (connection->broken()) return;
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(connection));
}

void Scripts::load_all(Connection& connection) {
  std::vector<std::vector<std::string_view>> commands;
  for (const auto source : sources_) commands.push_back({"SCRIPT", "LOAD", source});
  auto replies = connection.pipeline(commands);
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (replies[i]->type == REDIS_REPLY_ERROR) throw RedisError{text(replies[i].get()), false, true};
    shas_[i] = text(replies[i].get());
  }
}

std::string Scripts::load(Connection& connection, std::size_t index) {
  std::string sha = text(connection.command({"SCRIPT", "LOAD", sources_.at(index)}).get());
  std::lock_guard lock(mutex_);
  shas_[index] = sha;
  return sha;
}

std::string Scripts::sha(std::size_t index) {
  std::lock_guard lock(mutex_);
  return shas_.at(index);
}

std::vector<std::string_view> Scripts::evalsha(const std::string& sha, const std::vector<std::string_view>& keys,
                                               const std::vector<std::string_view>& args, std::string& count) const {
  count = std::to_string(keys.size());
  std::vector<std::string_view> command{"EVALSHA", sha, count};
  command.insert(command.end(), keys.begin(), keys.end());
  command.insert(command.end(), args.begin(), args.end());
  return command;
}

Reply Scripts::run(Connection& connection, std::size_t index, const std::vector<std::string_view>& keys,
                   const std::vector<std::string_view>& args) {
  start(connection, index, keys, args);
  return finish(connection, index, keys, args, std::chrono::milliseconds::max());
}

void Scripts::start(Connection& connection, std::size_t index, const std::vector<std::string_view>& keys,
                    const std::vector<std::string_view>& args) {
  std::string sha = this->sha(index);
  if (sha.empty()) sha = load(connection, index);
  std::string count;
  connection.send(evalsha(sha, keys, args, count));
}

Reply Scripts::finish(Connection& connection, std::size_t index, const std::vector<std::string_view>& keys,
                      const std::vector<std::string_view>& args, std::chrono::milliseconds timeout) {
  try {
    return connection.receive(timeout);
  } catch (const RedisError& e) {
    // The server lost its script cache (SCRIPT FLUSH, restart): the script did not run.
    if (e.connection || e.message.rfind("NOSCRIPT", 0) != 0) throw;
  }
  const std::string reloaded = load(connection, index);
  std::string count;
  return connection.command(evalsha(reloaded, keys, args, count));
}

}  // namespace dlock::backends::redis
