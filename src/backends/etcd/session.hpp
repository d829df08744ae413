#pragma once

// A client's session: one etcd lease, granted with the URL's TTL and kept alive by a thread of
// its own (etcd's concurrency.Session). Every node this client makes lives under it, so they all
// go when it ends: revoked when the client closes, or expired by the cluster when the client
// stops (a killed process, a partition).
//
// Its loss is reported once, at once (`on_lost`), as etcd's Session.Done(): a keep-alive answered
// that the lease is gone (revoked, expired), or no keep-alive answered for a whole TTL since the
// last one that was (the cluster may have expired it by then). The thread times that from the
// sending of the last keep-alive answered, so it never trusts the lease longer than the cluster
// keeps it.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/etcd/connection.hpp"

namespace dlock::backends::etcd {

class Session {
 public:
  // Grants the lease (one round trip); throws as the request does.
  Session(std::shared_ptr<Connection> connection, std::function<void(const std::string& why)> on_lost);
  // Stops the keep-alives and revokes the lease: this client's nodes go at once.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  std::int64_t id() const { return id_; }
  // The TTL the cluster granted (at least etcd's minimum, which may exceed the URL's).
  std::chrono::milliseconds ttl() const { return ttl_; }
  // The loss was reported: nothing may be made under this lease any more.
  bool over() const;
  // When the request was sent whose answer last confirmed the lease (the grant, or the last
  // keep-alive answered): the cluster keeps it at least a TTL from then.
  std::chrono::steady_clock::time_point trusted_since() const;
  // Sends a keep-alive now and then calls `then` (on the session's thread), whether it was
  // answered or not: an evicted holder refreshes its lease before it acts on the eviction, so
  // its lock delay runs a whole TTL from then (the TTL that holder reports say).
  void keep_alive_then(std::function<void()> then);
  // A request found the lease gone before the keep-alives did: reports the loss now.
  void end(const std::string& why);

 private:
  void run(std::stop_token stop);

  const std::shared_ptr<Connection> connection_;
  const std::function<void(const std::string&)> on_lost_;
  std::int64_t id_ = 0;
  std::chrono::milliseconds ttl_{0};
  mutable std::mutex mutex_;
  std::condition_variable_any wake_;
  bool over_ = false;
  std::chrono::steady_clock::time_point trusted_since_;
  std::vector<std::function<void()>> after_keep_alive_;
  std::jthread thread_;  // last: started when everything it uses is ready
};

}  // namespace dlock::backends::etcd
