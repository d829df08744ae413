#pragma once

// The connections of a mysql:// client: opened on demand, kept for reuse, handed to one thread
// at a time.

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/mysql/connection.hpp"
#include "backends/pooled.hpp"

namespace dlock::backends::mysql {

// Connections are opened on demand and kept for reuse; a broken one is dropped on return.
// A connection can be taken by serial (the one holding a doorbell) when it is idle.
class Pool {
 public:
  explicit Pool(ConnectOptions options) : options_(std::move(options)) {}

  using Lease = Pooled<Pool, Connection>;
  // Any idle connection, or a new one. Throws SqlError when connecting fails.
  Lease take();
  // An idle connection whose serial is not listed, or a new one.
  Lease take_excluding(const std::vector<std::uint64_t>& serials);
  // The connection with this serial if it is still open (waiting while another thread uses
  // it); otherwise any connection.
  Lease take(std::uint64_t serial);

  const ConnectOptions& options() const noexcept { return options_; }

 private:
  friend Lease;
  void give_back(std::unique_ptr<Connection> connection);

  ConnectOptions options_;
  std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::unordered_map<std::uint64_t, bool> busy_;  // serials of open connections: in use?
};

}  // namespace dlock::backends::mysql
