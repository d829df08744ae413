#pragma once

// Several keys held as one lock (Client::acquire_all, Client::multi_mutex).
//
//   auto accounts = client.multi_mutex({"account/" + from, "account/" + to});
//   {
//     std::unique_lock guard(accounts);     // both, or it waits holding neither
//     transfer(from, to, accounts.lease()->token("account/" + to));
//   }
//
// The rules (docs/design.md, "Several keys at once"):
//  - The keys are taken in one order, bytewise ascending, whatever order the caller gives;
//    duplicates are folded. Two callers with overlapping sets never deadlock.
//  - All or nothing: a call that cannot have every key releases what it took. While it waits
//    for a busy key it holds none of the others, so a waiter never blocks anyone.
//  - Each key keeps its own lease and fencing token; they renew together (each by the client's
//    renewal thread) and the loss of one is the loss of the set: stop_token() fires and the
//    on_lost callbacks run once. A re-entry by the same owner re-enters every key and
//    extends each lease.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/client.hpp"
#include "dlock/export.hpp"
#include "dlock/timed_lockable.hpp"
#include "dlock/types.hpp"

namespace dlock {

namespace detail {
struct MultiLeaseState;
struct MultiMutexState;
}  // namespace detail

// Every key of one multi-key acquisition, held until release() or destruction. Move-only.
class DLOCK_EXPORT MultiLease {
 public:
  MultiLease(MultiLease&& other) noexcept;
  MultiLease& operator=(MultiLease&& other) noexcept;
  MultiLease(const MultiLease&) = delete;
  MultiLease& operator=(const MultiLease&) = delete;
  // Releases every key still held, last key first. Never throws.
  ~MultiLease();

  // The keys, in the order they were taken (sorted, without duplicates).
  std::vector<std::string> keys() const;
  // One lease per key, in the order of keys().
  const std::vector<Lease>& leases() const noexcept { return leases_; }
  // The lease of `key`; throws std::out_of_range when the set has no such key.
  const Lease& lease(std::string_view key) const;
  // The fencing token of `key`: each key has its own.
  std::uint64_t token(std::string_view key) const { return lease(key).token(); }
  // The earliest Lease::valid_until() of the keys: the set is trustworthy until then.
  std::chrono::steady_clock::time_point valid_until() const noexcept;
  // The shortest Lease::ttl() of the keys; renewals come at a third of each key's own.
  std::chrono::milliseconds ttl() const noexcept;
  // True once any key's lease is lost.
  bool lost() const noexcept;
  // True while every key is held and none is lost.
  bool held() const noexcept;
  // Requested as soon as any key's stop token is (its lease lost or about to run out).
  std::stop_token stop_token() const noexcept;
  // Called once, for the first key lost (immediately, on the calling thread, if one already
  // is). Several callbacks may be registered.
  void on_lost(std::function<void(const LossInfo&)> callback);

  // Extends every lease to `ttl` (default: the TTL it was taken with). Throws LockLostError,
  // after renewing the others, if some key is no longer held.
  void renew(std::optional<std::chrono::milliseconds> ttl = std::nullopt);
  // Releases every key, last key first. Throws LockLostError, after releasing the others, if
  // some key had been lost. A second call is a no-op.
  void release();
  // Stops tracking every key without releasing it (Lease::detach).
  void detach() noexcept;

 private:
  friend struct detail::MultiLeaseState;
  MultiLease(std::vector<Lease> leases, std::shared_ptr<detail::MultiLeaseState> state);
  void release_all(bool rethrow);

  std::vector<Lease> leases_;
  std::shared_ptr<detail::MultiLeaseState> state_;
};

// The result of a non-blocking or bounded multi-key acquire: the MultiLease, or the key that
// stayed busy and who held it.
class DLOCK_EXPORT MultiAttempt {
 public:
  explicit MultiAttempt(MultiLease lease) : lease_(std::move(lease)) {}
  MultiAttempt(std::string busy_key, std::vector<LockInfo> holders)
      : busy_key_(std::move(busy_key)), holders_(std::move(holders)) {}

  explicit operator bool() const noexcept { return lease_.has_value(); }
  bool acquired() const noexcept { return lease_.has_value(); }
  // The lease; throws std::logic_error when the attempt failed.
  MultiLease& lease();
  // When the attempt failed: the key it could not get, and who held it (Attempt::holders).
  const std::string& busy_key() const noexcept { return busy_key_; }
  const std::vector<LockInfo>& holders() const noexcept { return holders_; }

 private:
  std::optional<MultiLease> lease_;
  std::string busy_key_;
  std::vector<LockInfo> holders_;
};

// Several keys as one TimedLockable: std::unique_lock, std::scoped_lock and std::lock_guard
// work with it. As Mutex: each owner (by default each thread) has its own holds, and lock()
// twice re-enters every key. Thread-safe; movable, not copyable.
class DLOCK_EXPORT MultiMutex : public detail::TimedTryLock<MultiMutex> {
 public:
  MultiMutex(MultiMutex&&) noexcept;
  MultiMutex& operator=(MultiMutex&&) noexcept;
  ~MultiMutex();

  // Blocks until every key is held. Throws dlock::Error on backend failure.
  void lock();
  // One attempt at each key, in order: false (holding nothing) when one is busy.
  bool try_lock();
  // try_lock_for(duration) and try_lock_until(time_point), of any clock: TimedTryLock.
  // Releases the calling owner's latest hold of every key. Never throws; a lease found lost
  // is reported to the loss callbacks and the log.
  void unlock() noexcept;

  // The keys, sorted and without duplicates.
  const std::vector<std::string>& keys() const noexcept;
  // The calling owner's current hold, or nullptr when it holds nothing.
  const MultiLease* lease() const;
  // The key that was busy when the calling owner's latest try_lock* failed, and who held it
  // (MultiAttempt); empty before any failed.
  std::string last_busy_key() const;
  std::vector<LockInfo> last_holders() const;
  // Called when any set taken through this mutex is lost.
  void on_lost(std::function<void(const LossInfo&)> callback);

 private:
  friend class Client;
  friend class detail::TimedTryLock<MultiMutex>;
  explicit MultiMutex(std::shared_ptr<detail::MultiMutexState> state);
  bool try_lock_until_steady(std::chrono::steady_clock::time_point deadline);
  bool try_lock_for_steady(std::chrono::steady_clock::duration timeout);

  std::shared_ptr<detail::MultiMutexState> state_;
};

}  // namespace dlock
