#pragma once

// The connection layer of the Redis backends: one server's address and credentials (from a
// URL), a hiredis connection, a pool of them, and the server-side scripts run by EVALSHA.
// Nothing here knows about locks, so Redlock can keep one Pool per server.
//
// A Connection is used by one thread at a time (interrupt() aside); Pool and Scripts may be
// shared. Every socket is close-on-exec: a command dlock starts never inherits one.

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backends/pooled.hpp"
#include "core/url.hpp"

namespace dlock::backends::redis {

// One server: redis://[user:password@]host[:port][/db]
struct Endpoint {
  std::string host;
  std::uint16_t port = 6379;
  std::string user;      // an ACL user (Redis 6+); empty: the default user
  std::string password;  // empty: no AUTH
  int db = 0;
  std::chrono::milliseconds connect_timeout{2'000};
  std::chrono::milliseconds command_timeout{5'000};
  std::string redacted_url;  // for messages: the URL without its password
};

// The endpoint of `url` (redis:// only; rediss:// is refused, as Debian's hiredis 0.14 has no
// TLS), taking the connection options (connect_timeout, command_timeout) from `options`.
// Throws ConfigurationError naming the problem.
Endpoint parse_endpoint(const core::Url& url, core::UrlOptions& options);

// A failure of the connection or an error reply. `sent`: the command may have reached the
// server (the connection failed after writing it, or timed out waiting for the answer).
struct RedisError {
  std::string message;
  bool connection = false;  // false: an error reply from the server
  bool sent = false;
};

// Throws the dlock error for `e`: ConfigurationError for credentials, permissions and set-up
// (naming the fix), ConnectionError when unreachable, OutcomeUnknownError when a write may have
// run, BackendError otherwise. Messages name the server by its redacted URL.
[[noreturn]] void raise(const RedisError& e, const Endpoint& endpoint, const std::string& backend,
                        std::string_view key = {}, bool writes = true);

struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// Reading replies: integers may come as integer or text (Lua numbers vs. stored strings).
std::string text(const redisReply* reply);
std::int64_t integer(const redisReply* reply);
bool is_nil(const redisReply* reply);

class Connection {
 public:
  // Connects, authenticates and selects the database; throws RedisError.
  explicit Connection(const Endpoint& endpoint);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // One command; an error reply is thrown as RedisError too. Throws RedisError.
  Reply command(const std::vector<std::string_view>& args);
  // A blocking command (BLPOP) whose server-side timeout is `wait`: the socket waits that
  // long plus the command timeout.
  Reply blocking(const std::vector<std::string_view>& args, std::chrono::milliseconds wait);
  // Several commands in one write; every reply, error replies included (not thrown).
  std::vector<Reply> pipeline(const std::vector<std::vector<std::string_view>>& commands);
  // One command split in two, to have several servers work on a request at once (Redlock):
  // send() writes it; receive() reads its answer, waiting at most `timeout` (the command
  // timeout when longer). Throws RedisError; an error reply too.
  void send(const std::vector<std::string_view>& args);
  Reply receive(std::chrono::milliseconds timeout);

  // For a subscribed connection: the next message the server pushes, waiting as long as it
  // takes (TCP keepalive notices a server gone silent) or until interrupt(). Throws RedisError.
  Reply next_push();
  // Ends a next_push() waiting in another thread, which then throws: the connection breaks.
  // The one member another thread may call, while the connection exists.
  void interrupt() noexcept;

  // After a failure the connection is unusable.
  bool broken() const noexcept { return context_ == nullptr || context_->err != 0; }
  // For a connection idle in the pool: false when the server closed it meanwhile. Looks at
  // the socket only; no round trip.
  bool still_open() const noexcept;

 private:
  void append(const std::vector<std::string_view>& args);
  Reply read(bool throw_error_reply);
  [[noreturn]] void fail(bool sent);
  void set_timeout(std::chrono::milliseconds timeout);

  struct ContextDeleter {
    void operator()(redisContext* context) const noexcept { redisFree(context); }
  };

  const Endpoint& endpoint_;
  std::unique_ptr<redisContext, ContextDeleter> context_;
};

// Connections opened on demand and kept for reuse; a broken one is dropped when returned.
class Pool {
 public:
  explicit Pool(Endpoint endpoint) : endpoint_(std::move(endpoint)) {}

  using Lease = Pooled<Pool, Connection>;
  // An idle connection still open, or a new one. Throws RedisError when connecting fails.
  Lease take();
  const Endpoint& endpoint() const noexcept { return endpoint_; }

 private:
  friend Lease;
  void give_back(std::unique_ptr<Connection> connection);

  Endpoint endpoint_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

// The scripts one server runs, each loaded once (SCRIPT LOAD) and run by EVALSHA; loaded
// again when the server answers NOSCRIPT (after SCRIPT FLUSH or a restart).
class Scripts {
 public:
  explicit Scripts(std::vector<std::string_view> sources) : sources_(std::move(sources)), shas_(sources_.size()) {}

  // Loads every script in one round trip.
  void load_all(Connection& connection);
  // EVALSHA of script `index` (its place in `sources`). Throws RedisError.
  Reply run(Connection& connection, std::size_t index, const std::vector<std::string_view>& keys,
            const std::vector<std::string_view>& args);
  // run() split in two (see Connection::send): start() sends the EVALSHA; finish() reads its
  // answer and, after NOSCRIPT, loads the script and runs it again, taking the same keys and
  // args. Throws RedisError.
  void start(Connection& connection, std::size_t index, const std::vector<std::string_view>& keys,
             const std::vector<std::string_view>& args);
  Reply finish(Connection& connection, std::size_t index, const std::vector<std::string_view>& keys,
               const std::vector<std::string_view>& args, std::chrono::milliseconds timeout);

 private:
  std::string load(Connection& connection, std::size_t index);
  std::string sha(std::size_t index);
  std::vector<std::string_view> evalsha(const std::string& sha, const std::vector<std::string_view>& keys,
                                        const std::vector<std::string_view>& args, std::string& count) const;

  std::vector<std::string_view> sources_;
  std::mutex mutex_;
  std::vector<std::string> shas_;
};

}  // namespace dlock::backends::redis
