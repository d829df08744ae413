#include "backends/mysql/pool.hpp"

#include <algorithm>

namespace dlock::backends::mysql {

Pool::Lease Pool::take() { return take_excluding({}); }

Pool::Lease Pool::take_excluding(const std::vector<std::uint64_t>& serials) {
  std::vector<std::unique_ptr<Connection>> closed;  // closed outside the lock
  {
    std::lock_guard lock(mutex_);
    for (;;) {
      const auto it = std::find_if(idle_.rbegin(), idle_.rend(), [&](const auto& c) {
        return std::find(serials.begin(), serials.end(), c->serial()) == serials.end();
      });
      if (it == idle_.rend()) break;
      auto connection = std::move(*it);
      idle_.erase(std::next(it).base());
      if (!connection->still_open()) {
        busy_.erase(connection->serial());
        closed.push_back(std::move(connection));
        continue;
      }
      busy_[connection->serial()] = true;
      return Lease(*this, std::move(connection));
    }
  }
  auto connection = std::make_unique<Connection>(options_);
  std::lock_guard lock(mutex_);
  busy_[connection->serial()] = true;
  return Lease(*this, std::move(connection));
}

Pool::Lease Pool::take(std::uint64_t serial) {
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto known = busy_.find(serial);
    if (known == busy_.end()) break;  // closed since: any connection will do
    if (!known->second) {
      const auto it = std::find_if(idle_.begin(), idle_.end(), [&](const auto& c) { return c->serial() == serial; });
      auto connection = std::move(*it);
      idle_.erase(it);
      if (!connection->still_open()) {
        busy_.erase(known);
        lock.unlock();
        connection.reset();
        return take();
      }
      known->second = true;
      return Lease(*this, std::move(connection));
    }
    returned_.wait(lock);
  }
  lock.unlock();
  return take();
}

void Pool::give_back(std::unique_ptr<Connection> connection) {
  {
    std::lock_guard lock(mutex_);
    if (connection->broken()) {
      busy_.erase(connection->serial());
    } else {
      busy_[connection->serial()] = false;
      idle_.push_back(std::move(connection));
    }
  }
  returned_.notify_all();
  // A broken connection is closed here, outside the lock.
}

}  // namespace dlock::backends::mysql
