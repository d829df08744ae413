#include "backends/postgres/pool.hpp"

namespace dlock::backends::postgres {

Pool::Lease Pool::take() {
  for (;;) {
    std::unique_ptr<Connection> connection;
    {
      const std::lock_guard lock(mutex_);
      if (idle_.empty()) break;
      connection = std::move(idle_.back());
      idle_.pop_back();
    }
    if (connection->still_open()) return Lease(*this, std::move(connection));
  }
  return Lease(*this, std::make_unique<Connection>(options_));
}

void Pool::give_back(std::unique_ptr<Connection> connection) {
  if (connection->broken()) return;
  const std::lock_guard lock(mutex_);
  idle_.push_back(std::move(connection));
}

}  // namespace dlock::backends::postgres
