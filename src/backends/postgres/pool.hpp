#pragma once

// The connections of a postgres:// client: opened on demand, kept for reuse, handed to one
// thread at a time. A connection the server closed (restart, pg_terminate_backend) is noticed
// when it is taken, without a round trip, and replaced.

#include <memory>
#include <mutex>
#include <vector>

#include "backends/pooled.hpp"
#include "backends/postgres/connection.hpp"

namespace dlock::backends::postgres {

class Pool {
 public:
  explicit Pool(ConnectOptions options) : options_(std::move(options)) {}
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  using Lease = Pooled<Pool, Connection>;
  // An idle connection, or a new one. Throws PgError when connecting fails.
  Lease take();

  const ConnectOptions& options() const noexcept { return options_; }

 private:
  friend Lease;
  void give_back(std::unique_ptr<Connection> connection);

  ConnectOptions options_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace dlock::backends::postgres
