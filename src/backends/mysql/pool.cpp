#include "backends/mysql/pool.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace dlock::backends::mysql {

Pool::~Pool() { stop_watching(); }

Pool::Lease Pool::take() { return take_matching(false); }

Pool::Lease Pool::take_unpinned() { return take_matching(true); }

void Pool::pin(std::uint64_t serial) {
  std::lock_guard lock(mutex_);
  ++pins_[serial];
}

void Pool::unpin(std::uint64_t serial) {
  std::lock_guard lock(mutex_);
  const auto it = pins_.find(serial);
  if (it != pins_.end() && --it->second <= 0) pins_.erase(it);
}

Pool::Lease Pool::take_matching(bool unpinned_only) {
  std::vector<std::unique_ptr<Connection>> closed;  // closed outside the lock
  {
    std::lock_guard lock(mutex_);
    for (;;) {
      const auto it = std::find_if(idle_.rbegin(), idle_.rend(),
                                   [&](const auto& c) { return !unpinned_only || pins_.count(c->serial()) == 0; });
      if (it == idle_.rend()) break;
      if (!(*it)->still_open()) {
        closed.push_back(drop_idle(std::next(it).base()));
        continue;
      }
      auto connection = std::move(*it);
      idle_.erase(std::next(it).base());
      busy_[connection->serial()] = true;
      stop_polling(*connection);
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
      stop_polling(*connection);
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
      // Its session ended, or ends as the client closes it: so do the locks it held.
      if (watched_.erase(connection->serial()) != 0) report_closed(connection->serial());
    } else {
      busy_[connection->serial()] = false;
      start_polling(*connection);
      idle_.push_back(std::move(connection));
    }
  }
  returned_.notify_all();
  // A broken connection is closed here, outside the lock.
}

std::unique_ptr<Connection> Pool::drop_idle(std::vector<std::unique_ptr<Connection>>::iterator it) {
  auto connection = std::move(*it);
  idle_.erase(it);
  busy_.erase(connection->serial());
  stop_polling(*connection);
  if (watched_.erase(connection->serial()) != 0) report_closed(connection->serial());
  return connection;
}

void Pool::report_closed(std::uint64_t serial) {
  closed_watched_.push_back(serial);
  const std::uint64_t one = 1;
  (void)!::write(bell_, &one, sizeof one);  // EAGAIN: it is rung already
}

void Pool::start_polling(const Connection& connection) {
  if (epoll_ < 0 || watched_.count(connection.serial()) == 0 || connection.socket() < 0) return;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.u64 = connection.serial();
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, connection.socket(), &event);
}

void Pool::stop_polling(const Connection& connection) {
  if (epoll_ < 0 || watched_.count(connection.serial()) == 0 || connection.socket() < 0) return;
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, connection.socket(), nullptr);
}

void Pool::on_closed(std::function<void(std::uint64_t serial)> closed) {
  closed_ = std::move(closed);
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  bell_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_ < 0 || bell_ < 0) throw SqlError{0, std::string("epoll or eventfd failed: ") + std::strerror(errno)};
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kBell;
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, bell_, &event);
  // The thread takes no process signals: a program that waits for SIGTERM with sigwait()
  // blocks it only in its own threads (dlock serve in session mode died of it).
  sigset_t all, before;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &before);
  watcher_ = std::thread([this] { watch_idle(); });
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

void Pool::watch(std::uint64_t serial) {
  std::lock_guard lock(mutex_);
  if (epoll_ < 0 || !watched_.insert(serial).second) return;
  const auto it = std::find_if(idle_.begin(), idle_.end(), [&](const auto& c) { return c->serial() == serial; });
  if (it != idle_.end()) start_polling(**it);  // otherwise when it comes back
}

void Pool::unwatch(std::uint64_t serial) {
  std::lock_guard lock(mutex_);
  const auto it = std::find_if(idle_.begin(), idle_.end(), [&](const auto& c) { return c->serial() == serial; });
  if (it != idle_.end()) stop_polling(**it);
  watched_.erase(serial);
}

void Pool::stop_watching() noexcept {
  if (!watcher_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    const std::uint64_t one = 1;
    (void)!::write(bell_, &one, sizeof one);
  }
  watcher_.join();
  ::close(bell_);
  ::close(epoll_);
}

void Pool::watch_idle() {
  epoll_event events[16];
  for (;;) {
    const int ready = ::epoll_wait(epoll_, events, 16, -1);  // < 0: EINTR
    std::vector<std::unique_ptr<Connection>> closed;        // closed outside the lock
    std::vector<std::uint64_t> closed_watched;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      for (int i = 0; i < ready; ++i) {
        if (events[i].data.u64 == kBell) {
          std::uint64_t rung = 0;
          (void)!::read(bell_, &rung, sizeof rung);
          continue;
        }
        // Still idle (taken since, an answer to its new user may be what was readable), and
        // closed: an idle session has nothing to read but the server's goodbye.
        const auto it = std::find_if(idle_.begin(), idle_.end(),
                                     [&](const auto& c) { return c->serial() == events[i].data.u64; });
        if (it != idle_.end() && !(*it)->still_open()) closed.push_back(drop_idle(it));
      }
      closed_watched.swap(closed_watched_);  // with those found closed elsewhere
    }
    closed.clear();
    for (const std::uint64_t serial : closed_watched) closed_(serial);
  }
}

}  // namespace dlock::backends::mysql
