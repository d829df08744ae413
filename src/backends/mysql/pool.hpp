#pragma once

// The connections of a mysql:// client: opened on demand, kept for reuse, handed to one thread
// at a time.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backends/mysql/connection.hpp"
#include "backends/pooled.hpp"

namespace dlock::backends::mysql {

// Connections are opened on demand and kept for reuse; a broken one is dropped on return.
// A connection can be taken by serial (the one holding a doorbell) when it is idle.
class Pool {
 public:
  explicit Pool(ConnectOptions options) : options_(std::move(options)) {}
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  using Lease = Pooled<Pool, Connection>;
  // Any idle connection, or a new one. Throws SqlError when connecting fails.
  Lease take();
  // An idle connection that is not pinned, or a new one.
  Lease take_unpinned();
  // The connection with this serial if it is still open (waiting while another thread uses
  // it); otherwise any connection.
  Lease take(std::uint64_t serial);

  const ConnectOptions& options() const noexcept { return options_; }

  // A connection pinned (once per pin) holds a lock for an acquisition: take_unpinned() never
  // hands it out, take(serial) still does. Pinned while its user still has it, so that it is
  // never idle unpinned in between.
  void pin(std::uint64_t serial);
  void unpin(std::uint64_t serial);

  // Watches the idle connections whose serials are watched (epoll, on a thread of the pool's,
  // which taking and giving back never wake), and calls `closed` with the serial of each one
  // the server closes (KILL, restart, wait_timeout) as it happens, rather than when it is next
  // taken, or that breaks in use: a connection that holds a session lock tells its holder at
  // once. Called once, before any watch().
  void on_closed(std::function<void(std::uint64_t serial)> closed);
  void watch(std::uint64_t serial);
  void unwatch(std::uint64_t serial);
  // Ends the watching thread: before whatever `closed` uses goes away.
  void stop_watching() noexcept;

 private:
  friend Lease;
  static constexpr std::uint64_t kBell = ~std::uint64_t{0};  // the epoll datum of bell_

  void give_back(std::unique_ptr<Connection> connection);
  Lease take_matching(bool unpinned_only);
  // The watching thread's loop.
  void watch_idle();
  // Takes an idle connection the server closed out of the pool. Under mutex_.
  std::unique_ptr<Connection> drop_idle(std::vector<std::unique_ptr<Connection>>::iterator it);
  // A watched connection is gone: the watching thread reports it (never from inside a
  // caller's statement). Under mutex_.
  void report_closed(std::uint64_t serial);
  // A watched connection goes idle, or is taken. Under mutex_.
  void start_polling(const Connection& connection);
  void stop_polling(const Connection& connection);

  ConnectOptions options_;
  std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::unordered_map<std::uint64_t, bool> busy_;  // serials of open connections: in use?
  std::function<void(std::uint64_t)> closed_;
  std::unordered_map<std::uint64_t, int> pins_;
  std::unordered_set<std::uint64_t> watched_;
  std::vector<std::uint64_t> closed_watched_;  // found closed, not reported yet
  int epoll_ = -1;  // the idle watched connections, and bell_
  int bell_ = -1;   // an eventfd that wakes the watching thread: a report, or stop
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace dlock::backends::mysql
