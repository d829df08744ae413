#pragma once

// Force-release notices from one Redis server: a connection of its own, SUBSCRIBEd to a channel,
// read on a thread of its own that hands every message to a callback. The force-release scripts
// PUBLISH the key they evicted (lua/common.lua, evict), so an evicted holder learns at once
// instead of at its next renewal (Backend::watch).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "backends/redis/connection.hpp"

namespace dlock::backends::redis {

class Subscriber {
 public:
  // Starts subscribing at once. `message` runs on the subscriber's thread, holding no lock.
  // After a failure (a restart, a broken connection) it connects and subscribes again, backing
  // off up to 2 s between tries; notices published meanwhile are lost.
  Subscriber(Endpoint endpoint, std::string channel, std::function<void(std::string_view)> message);
  // Stops the thread at once, even while it waits for a message or between tries.
  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // Waits for the first try to end. False when the server refused it (a user without SUBSCRIBE
  // or the channel), after a warning naming the fix; true when subscribed, or unreachable for
  // now and trying again.
  bool accepted();

 private:
  void run();
  void listen();
  void settle(std::optional<RedisError> refusal);

  const Endpoint endpoint_;
  const std::string channel_;
  const std::function<void(std::string_view)> message_;

  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  bool settled_ = false;  // the first try ended
  std::optional<RedisError> refusal_;
  // The subscribed connection, while there is one: the thread reads it without the mutex (it
  // alone sets and resets it, under the mutex); the destructor interrupts it under the mutex.
  std::unique_ptr<Connection> connection_;
  std::thread thread_;  // last: starts after every other member is ready
};

}  // namespace dlock::backends::redis
