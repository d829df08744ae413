#pragma once

// The N independent servers of a redlock:// client and the rounds run on them: a connection
// pool for each, the scripts loaded on each, the servers left out after a failure, and a round
// that sends one script to every server at once, then reads the answers in turn, so it costs
// the slowest server's round trip, not their sum. What the answers mean (a majority of grants,
// the holder they agree on) is the backend's.
//
// Shared by every thread of the client.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/redis/connection.hpp"
#include "backends/redlock/common.hpp"

namespace dlock::backends::redlock {

using Args = std::vector<std::string_view>;

// One round: a script (or, with none, the plain command in args) for each server that has args.
struct Request {
  std::optional<Script> script;
  std::vector<std::string_view> keys;
  std::vector<std::optional<Args>> args;
};

// One server's part of a round: its reply, or why there is none.
struct Answer {
  redis::Reply reply;
  std::optional<redis::RedisError> error;
  bool ok() const noexcept { return reply != nullptr; }
};

// How many of `answers` are replies.
std::size_t answered(const std::vector<Answer>& answers);

class Servers {
 public:
  // Connects to each server and loads the scripts now: a wrong address or password fails at
  // open. A minority may be down; a server refusing the credentials is an error even so.
  // Throws ConfigurationError or ConnectionError.
  explicit Servers(const std::vector<redis::Endpoint>& endpoints);

  std::size_t size() const noexcept { return servers_.size(); }
  // A majority of the servers.
  std::size_t quorum() const noexcept { return quorum_; }
  const redis::Endpoint& endpoint(std::size_t server) const { return servers_[server]->pool.endpoint(); }

  // A request's args for every server, and for none (to fill in a few).
  std::vector<std::optional<Args>> everyone(const Args& args) const { return {servers_.size(), args}; }
  std::vector<std::optional<Args>> no_one() const { return std::vector<std::optional<Args>>(servers_.size()); }

  // Runs `request` on every server it has args for, reading answers for `timeout` from the
  // start (those that arrived by then are read even when it is up). A server left out, or one
  // that fails, answers its error; never throws for a server.
  std::vector<Answer> round(const Request& request, std::chrono::milliseconds timeout);

  // Why `server` is left out of every round for now, after a failure; nothing when it is not.
  std::optional<std::string> left_out(std::size_t server) const;
  // Leaves `server` out for a while after `e`, a failure of its connection.
  void failed(std::size_t server, const redis::RedisError& e);
  // A connection to `server` on its own. Throws RedisError.
  redis::Pool::Lease take(std::size_t server) { return servers_[server]->pool.take(); }
  // Runs one script on one connection. Throws RedisError.
  redis::Reply run(redis::Connection& connection, Script script, const Args& keys, const Args& args) {
    return scripts_.run(connection, script, keys, args);
  }

  // Throws the error of a round that fell short of a majority (or of `needed` servers, when
  // more): an error reply (credentials, permissions, a replica) as such, else ConnectionError
  // naming every server's failure.
  [[noreturn]] void no_majority(const std::vector<Answer>& answers, std::string_view key, const std::string& what,
                                std::size_t needed = 0) const {
    no_majority(answers, answered(answers), key, what, needed);
  }

 private:
  struct Server {
    explicit Server(redis::Endpoint endpoint) : pool(std::move(endpoint)) {}
    redis::Pool pool;
    std::atomic<std::chrono::steady_clock::rep> left_out_until{0};
    std::mutex mutex;
    std::string last_error;  // why it is left out
  };

  // `reached` servers answered, the others' errors are in `answers`.
  [[noreturn]] void no_majority(const std::vector<Answer>& answers, std::size_t reached, std::string_view key,
                                const std::string& what, std::size_t needed = 0) const;

  std::vector<std::unique_ptr<Server>> servers_;
  std::size_t quorum_;
  redis::Scripts scripts_;
};

}  // namespace dlock::backends::redlock
