#include "backends/mysql/pool.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace dlock::backends::mysql {

Pool::~Pool() { stop_watching(); }

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
      if (!(*it)->still_open()) {
        closed.push_back(drop_idle(std::next(it).base()));
        continue;
      }
      auto connection = std::move(*it);
      idle_.erase(std::next(it).base());
      busy_[connection->serial()] = true;
      return Lease(*this, std::move(connection));
    }
  }
  closed.clear();
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
      if (!(*it)->still_open()) {
        auto closed = drop_idle(it);
        lock.unlock();
        closed.reset();
        return take();
      }
      auto connection = std::move(*it);
      idle_.erase(it);
      known->second = true;
      return Lease(*this, std::move(connection));
    }
    returned_.wait(lock);
  }
  lock.unlock();
  return take();
}

void Pool::give_back(std::unique_ptr<Connection> connection) {
  bool watched = false;
  {
    std::lock_guard lock(mutex_);
    if (connection->broken()) {
      busy_.erase(connection->serial());
      // Its session ended, or ends as the client closes it: so do the locks it held.
      if (watched_.erase(connection->serial()) != 0) {
        closed_watched_.push_back(connection->serial());
        watched = true;
      }
    } else {
      busy_[connection->serial()] = false;
      watched = watched_.count(connection->serial()) != 0;
      idle_.push_back(std::move(connection));
    }
  }
  returned_.notify_all();
  if (watched) ring();
  // A broken connection is closed here, outside the lock.
}

std::unique_ptr<Connection> Pool::drop_idle(std::vector<std::unique_ptr<Connection>>::iterator it) {
  auto connection = std::move(*it);
  idle_.erase(it);
  busy_.erase(connection->serial());
  if (watched_.erase(connection->serial()) != 0) {
    closed_watched_.push_back(connection->serial());
    ring();  // the watching thread reports it
  }
  return connection;
}

void Pool::on_closed(std::function<void(std::uint64_t serial)> closed) {
  closed_ = std::move(closed);
  bell_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (bell_ < 0) throw SqlError{0, std::string("eventfd failed: ") + std::strerror(errno)};
  watcher_ = std::thread([this] { watch_idle(); });
}

void Pool::watch(std::uint64_t serial) {
  {
    std::lock_guard lock(mutex_);
    if (!closed_ || !watched_.insert(serial).second) return;
  }
  ring();
}

void Pool::unwatch(std::uint64_t serial) {
  std::lock_guard lock(mutex_);
  watched_.erase(serial);  // the watching thread looks at it at most once more
}

void Pool::stop_watching() noexcept {
  if (!watcher_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ring();
  watcher_.join();
  ::close(bell_);
}

void Pool::ring() noexcept {
  if (bell_ < 0) return;  // not watching
  const std::uint64_t one = 1;
  (void)!::write(bell_, &one, sizeof one);  // EAGAIN: it is rung already
}

void Pool::watch_idle() {
  std::vector<pollfd> sockets;
  std::vector<std::uint64_t> serials;
  for (;;) {
    sockets.assign(1, pollfd{bell_, POLLIN, 0});
    serials.assign(1, 0);
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      for (const auto& connection : idle_) {
        if (watched_.count(connection->serial()) == 0 || connection->socket() < 0) continue;
        sockets.push_back(pollfd{connection->socket(), POLLIN | POLLRDHUP, 0});
        serials.push_back(connection->serial());
      }
    }
    if (::poll(sockets.data(), sockets.size(), -1) < 0) continue;  // EINTR
    if (sockets[0].revents != 0) {
      std::uint64_t rung = 0;
      (void)!::read(bell_, &rung, sizeof rung);
    }
    std::vector<std::unique_ptr<Connection>> closed;  // closed outside the lock
    std::vector<std::uint64_t> closed_watched;
    {
      std::lock_guard lock(mutex_);
      for (std::size_t i = 1; i < sockets.size(); ++i) {
        if (sockets[i].revents == 0) continue;
        // Still idle (not taken since, when an answer to its new user is what is readable),
        // and closed: an idle session has nothing to read but the server's goodbye.
        const auto it = std::find_if(idle_.begin(), idle_.end(), [&](const auto& c) {
          return c->serial() == serials[i] && c->socket() == sockets[i].fd;
        });
        if (it != idle_.end() && !(*it)->still_open()) closed.push_back(drop_idle(it));
      }
      closed_watched.swap(closed_watched_);  // with those a taker found closed
    }
    closed.clear();
    for (const std::uint64_t serial : closed_watched) closed_(serial);
  }
}

}  // namespace dlock::backends::mysql
