#include "backends/redis/subscriber.hpp"

#include <algorithm>

#include "core/log.hpp"
#include "core/signal_free_thread.hpp"

namespace dlock::backends::redis {
namespace {

constexpr std::chrono::milliseconds kFirstRetry{50};
constexpr std::chrono::milliseconds kLastRetry{2'000};

}  // namespace

Subscriber::Subscriber(Endpoint endpoint, std::string channel, std::function<void(std::string_view)> message)
    : endpoint_(std::move(endpoint)), channel_(std::move(channel)), message_(std::move(message)),
      thread_(core::signal_free_thread([this] { run(); })) {}

Subscriber::~Subscriber() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (connection_) connection_->interrupt();
  }
  changed_.notify_all();
  thread_.join();
}

bool Subscriber::accepted() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return settled_; });
  if (!refusal_) return true;
  core::log(LogLevel::warning, "Redis at " + endpoint_.redacted_url + " refused to SUBSCRIBE to " + channel_ + " (" +
                                   refusal_->message +
                                   "), so holders learn of its force-releases at their next renewal only; grant "
                                   "the user SUBSCRIBE and the channel (&" + channel_ + ")");
  return false;
}

void Subscriber::settle(std::optional<RedisError> refusal) {
  {
    std::lock_guard lock(mutex_);
    if (settled_) return;
    settled_ = true;
    refusal_ = std::move(refusal);
  }
  changed_.notify_all();
}

void Subscriber::run() {
  auto retry = kFirstRetry;
  for (;;) {
    try {
      auto connection = std::make_unique<Connection>(endpoint_);
      connection->command({"SUBSCRIBE", channel_});
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        connection_ = std::move(connection);
      }
      settle(std::nullopt);
      retry = kFirstRetry;
      listen();
    } catch (const RedisError& e) {
      settle(e.connection ? std::nullopt : std::optional<RedisError>(e));
    }
    std::unique_lock lock(mutex_);
    connection_.reset();
    if (changed_.wait_for(lock, retry, [this] { return stopping_; })) return;
    retry = std::min(retry * 2, kLastRetry);
  }
}

void Subscriber::listen() {
  for (;;) {
    const Reply push = connection_->next_push();
    // ["message", channel, payload]; the subscription's own confirmations are skipped.
    if (push->type != REDIS_REPLY_ARRAY || push->elements != 3 || text(push->element[0]) != "message") continue;
    message_(text(push->element[2]));
  }
}

}  // namespace dlock::backends::redis
