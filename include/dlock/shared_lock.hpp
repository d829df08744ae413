#pragma once

// Shared holds: read-write locks (Client::shared_mutex) and semaphores (Client::semaphore).
//
//   auto catalog = client.shared_mutex("catalog");
//   {
//     std::shared_lock reading(catalog);      // with other readers, never with a writer
//     serve(catalog.shared_lease()->token());
//   }
//   {
//     std::unique_lock writing(catalog);      // alone; new readers wait while a writer waits
//     rebuild(catalog.lease()->token());      // above every earlier reader's and writer's
//   }
//
//   auto encoders = client.semaphore("gpu-encoders", 4);  // at most 4 holders at once
//   std::unique_lock permit(encoders);
//
// The rules (docs/design.md, "Read-write locks and semaphores"):
//  - A key has no holder, one exclusive holder (a writer) or shared holders (readers, or a
//    semaphore's permit holders). Each holder has its own lease, renewal, loss and fencing
//    token; tokens are per key, so every acquisition's token is above all earlier ones.
//  - Writers are not starved: once a writer waits, new readers wait behind it.
//  - A writer may also read (its shared request re-enters its exclusive hold); a reader cannot
//    upgrade (InvalidArgument: release the read hold first).
//  - Each owner (by default each thread) holds at most one permit of a semaphore; taking it
//    again re-enters. The number of permits is the name's while anyone holds it: a client
//    asking with another number gets InvalidArgument naming both.
// The same holds are open to every acquire call through LockOptions::mode and ::permits:
//   client.acquire("catalog", {.mode = dlock::LockMode::shared});

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/export.hpp"
#include "dlock/types.hpp"

namespace dlock {

// A distributed read-write lock meeting the standard TimedLockable and SharedTimedLockable
// requirements, so std::unique_lock and std::shared_lock work with it. Holds are per owner
// (by default per thread), as for Mutex. Thread-safe; movable, not copyable.
class DLOCK_EXPORT SharedMutex {
 public:
  // Exclusive (writer) side.
  void lock() { exclusive_.lock(); }
  bool try_lock() { return exclusive_.try_lock(); }
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return exclusive_.try_lock_for(timeout);
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return exclusive_.try_lock_until(deadline);
  }
  void unlock() noexcept { exclusive_.unlock(); }

  // Shared (reader) side.
  void lock_shared() { shared_.lock(); }
  bool try_lock_shared() { return shared_.try_lock(); }
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
    return shared_.try_lock_for(timeout);
  }
  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return shared_.try_lock_until(deadline);
  }
  void unlock_shared() noexcept { shared_.unlock(); }

  const std::string& key() const noexcept { return exclusive_.key(); }
  // The calling owner's current exclusive or shared lease, or nullptr.
  const Lease* lease() const { return exclusive_.lease(); }
  const Lease* shared_lease() const { return shared_.lease(); }
  // Who held the key when the calling owner's latest try_lock* or try_lock_shared* failed.
  std::vector<LockInfo> last_holders() const { return exclusive_.last_holders(); }
  std::vector<LockInfo> last_shared_holders() const { return shared_.last_holders(); }
  // Called when any lease taken through this lock, of either side, is lost.
  void on_lost(const std::function<void(const LossInfo&)>& callback) {
    exclusive_.on_lost(callback);
    shared_.on_lost(callback);
  }

 private:
  friend class Client;
  SharedMutex(Mutex exclusive, Mutex shared) : exclusive_(std::move(exclusive)), shared_(std::move(shared)) {}

  Mutex exclusive_;
  Mutex shared_;
};

// A distributed counting semaphore: at most permits() holders of its name at once, each
// holding one permit with its own lease and token, so a dead holder's permit comes back when
// its lease runs out. acquire()/release() as std::counting_semaphore names them, and
// lock()/unlock() so std::unique_lock works. Thread-safe; movable, not copyable.
class DLOCK_EXPORT Semaphore {
 public:
  void acquire() { permit_.lock(); }
  bool try_acquire() { return permit_.try_lock(); }
  template <class Rep, class Period>
  bool try_acquire_for(const std::chrono::duration<Rep, Period>& timeout) {
    return permit_.try_lock_for(timeout);
  }
  template <class Clock, class Duration>
  bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return permit_.try_lock_until(deadline);
  }
  void release() noexcept { permit_.unlock(); }

  void lock() { acquire(); }
  bool try_lock() { return try_acquire(); }
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_acquire_for(timeout);
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    return try_acquire_until(deadline);
  }
  void unlock() noexcept { release(); }

  const std::string& name() const noexcept { return permit_.key(); }
  std::uint32_t permits() const noexcept { return permits_; }
  // The calling owner's permit, or nullptr.
  const Lease* lease() const { return permit_.lease(); }
  // The permit holders when the calling owner's latest try_acquire* failed.
  std::vector<LockInfo> last_holders() const { return permit_.last_holders(); }
  void on_lost(std::function<void(const LossInfo&)> callback) { permit_.on_lost(std::move(callback)); }

 private:
  friend class Client;
  Semaphore(Mutex permit, std::uint32_t permits) : permit_(std::move(permit)), permits_(permits) {}

  Mutex permit_;
  std::uint32_t permits_;
};

}  // namespace dlock
