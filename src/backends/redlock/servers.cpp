#include "backends/redlock/servers.hpp"

#include <algorithm>

#include "dlock/errors.hpp"

namespace dlock::backends::redlock {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using redis::RedisError;

// A server that failed is left out of every round this long, then tried again: a dead or
// unreachable server costs one failed try per period, not one per operation.
constexpr milliseconds kRetryDown{1'000};

}  // namespace

std::size_t answered(const std::vector<Answer>& answers) {
  return static_cast<std::size_t>(std::count_if(answers.begin(), answers.end(), [](const Answer& a) { return a.ok(); }));
}

Servers::Servers(const std::vector<redis::Endpoint>& endpoints) : quorum_(endpoints.size() / 2 + 1), scripts_(kSources) {
  for (const auto& endpoint : endpoints) servers_.push_back(std::make_unique<Server>(endpoint));
  std::vector<Answer> answers(servers_.size());
  std::size_t reached = 0;
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    try {
      auto connection = take(i);
      scripts_.load_all(*connection);
      ++reached;
    } catch (const RedisError& e) {
      if (!e.connection) redis::raise(e, servers_[i]->pool.endpoint(), kName, {}, false);
      failed(i, e);
      answers[i].error = e;
    }
  }
  if (reached < quorum_) no_majority(answers, reached, {}, "cannot open");
}

std::optional<std::string> Servers::left_out(std::size_t server) const {
  Server& s = *servers_[server];
  if (Clock::now().time_since_epoch().count() >= s.left_out_until.load()) return std::nullopt;
  std::lock_guard lock(s.mutex);
  return "left out for " + std::to_string(kRetryDown.count()) + " ms after a failure: " + s.last_error;
}

void Servers::failed(std::size_t server, const RedisError& e) {
  Server& s = *servers_[server];
  {
    std::lock_guard lock(s.mutex);
    s.last_error = e.message;
  }
  s.left_out_until.store((Clock::now() + kRetryDown).time_since_epoch().count());
}

std::vector<Answer> Servers::round(const Request& request, milliseconds timeout) {
  const std::size_t n = servers_.size();
  std::vector<Answer> answers(n);
  std::vector<std::optional<redis::Pool::Lease>> connections(n);
  const auto start = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    if (!request.args[i]) continue;
    if (auto why = left_out(i)) {
      answers[i].error = RedisError{*why, true, false};
      continue;
    }
    try {
      connections[i].emplace(take(i));
      if (request.script) {
        scripts_.start(**connections[i], *request.script, request.keys, *request.args[i]);
      } else {
        (*connections[i])->send(*request.args[i]);
      }
    } catch (const RedisError& e) {
      if (e.connection) failed(i, e);
      answers[i].error = e;
      connections[i].reset();
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!connections[i]) continue;
    // Answers that arrived meanwhile are read even when the time is up.
    const auto left = std::max(std::chrono::ceil<milliseconds>(start + timeout - Clock::now()), milliseconds(1));
    try {
      answers[i].reply = request.script
                             ? scripts_.finish(**connections[i], *request.script, request.keys, *request.args[i], left)
                             : (*connections[i])->receive(left);
    } catch (const RedisError& e) {
      if (e.connection) failed(i, e);
      answers[i].error = e;
    }
  }
  return answers;
}

void Servers::no_majority(const std::vector<Answer>& answers, std::size_t reached, std::string_view key,
                          const std::string& what, std::size_t needed) const {
  // An error reply (credentials, permissions, a replica) says more than an unreachable server.
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (answers[i].error && !answers[i].error->connection) {
      redis::raise(*answers[i].error, servers_[i]->pool.endpoint(), kName, key, false);
    }
  }
  std::string why;
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (answers[i].error) why += "; " + servers_[i]->pool.endpoint().redacted_url + ": " + answers[i].error->message;
  }
  throw ConnectionError("redlock:// " + what + (key.empty() ? "" : " '" + std::string(key) + "'") + ": " +
                            std::to_string(reached) + " of " + std::to_string(servers_.size()) +
                            " servers answered, and it takes " +
                            (needed > quorum_ ? std::to_string(needed) : "a majority (" + std::to_string(quorum_) + ")") +
                            why,
                        kName, std::string(key));
}

}  // namespace dlock::backends::redlock
