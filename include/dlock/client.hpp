#pragma once

// dlock's client API.
//
// A Client is opened from a URL and is cheap to copy (copies share one connection set and one
// renewal thread). All member functions of Client, Lease and Mutex are thread-safe unless
// noted. Callbacks run on the client's renewal thread: keep them short and do not block.
//
//   auto client = dlock::Client::open("sqlite:///var/tmp/locks.db");
//   auto m = client.mutex("orders/42");
//   {
//     std::unique_lock guard(m);           // blocks; renews in the background
//     charge(order, m.lease()->token());   // hand the fencing token to the resource
//   }                                      // released here
//
// The explicit form returns a Lease:
//
//   if (auto attempt = client.try_acquire_for("nightly", 5s)) {
//     dlock::Lease& lease = attempt.lease();
//     run_until(lease.stop_token());       // fires before the lease can run out
//   } else {
//     for (const dlock::LockInfo& holder : attempt.holders())
//       log("held by {} for {}ms more", holder.owner, holder.ttl_left.count());
//   }

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/backend.hpp"
#include "dlock/errors.hpp"
#include "dlock/export.hpp"
#include "dlock/options.hpp"
#include "dlock/timed_lockable.hpp"
#include "dlock/types.hpp"

namespace dlock {

class MultiLease;
class MultiAttempt;
class MultiMutex;
class SharedMutex;
class Semaphore;

namespace detail {
struct ClientState;
struct LeaseState;
struct MutexState;
}  // namespace detail

// One acquisition of a key, held until release() or destruction. Move-only.
//
// Several Lease objects may share one acquisition (re-entry by the same owner): each is one
// hold, and the key is free again when the last hold is released. They share the fencing
// token, the expiry and the loss state.
class DLOCK_EXPORT Lease {
 public:
  Lease(Lease&& other) noexcept;
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  // Releases the hold if still held. Never throws: a failure is logged and, if the lease
  // turns out lost, reported to the loss callbacks.
  ~Lease();

  const std::string& key() const noexcept;
  const std::string& owner() const noexcept;
  // Fencing token: strictly greater than any earlier acquisition's token for this key. Pass
  // it to the resource you protect and have it reject older tokens.
  std::uint64_t token() const noexcept;
  // Hold count the backend reported when this hold was taken (1 unless re-entered).
  std::uint32_t hold_count() const noexcept;
  // Conservative end of the lease by this process's steady clock: the time the latest
  // successful acquire or renew was *sent*, plus the TTL, minus the safety margin.
  std::chrono::steady_clock::time_point valid_until() const noexcept;
  // The lease's length: the TTL asked for, or less where the store grants less (a session
  // store's lease is its session timeout). Renewals come at a third of it.
  std::chrono::milliseconds ttl() const noexcept;
  // True once the lease is known lost or expired. A released lease is not lost.
  bool lost() const noexcept;
  // True while this hold has not been released and the lease is not lost.
  bool held() const noexcept;
  // Requested when the lease is lost, or when valid_until() passes without a renewal.
  std::stop_token stop_token() const noexcept;
  // Called once, on the renewal thread, when the lease is lost (immediately, on the calling
  // thread, if it already is). Several callbacks may be registered.
  void on_lost(std::function<void(const LossInfo&)> callback);

  // Extends the lease to `ttl` (default: the TTL it was taken with) from now. Throws
  // LockLostError if it is no longer ours. Auto-renewing leases never need this.
  void renew(std::optional<std::chrono::milliseconds> ttl = std::nullopt);
  // Releases this hold. Throws LockLostError if the lease had already been lost, so the
  // caller learns that its critical section may not have been exclusive. A second call is
  // a no-op.
  void release();
  // Stops tracking this hold without releasing it: the backend keeps the lease until its TTL
  // runs out or Client::release(key, owner, token) drops it (how `dlock acquire` leaves a
  // lock held after the process exits). Renewal stops once no tracked hold remains.
  void detach() noexcept;

 private:
  friend struct detail::ClientState;
  Lease(std::shared_ptr<detail::ClientState> client, std::shared_ptr<detail::LeaseState> state,
        std::uint32_t hold_count);

  std::shared_ptr<detail::ClientState> client_;
  std::shared_ptr<detail::LeaseState> state_;
  std::uint32_t hold_count_ = 0;
  bool released_ = false;
};

// The result of a non-blocking or bounded acquire: a Lease, or who held the key.
class DLOCK_EXPORT Attempt {
 public:
  explicit Attempt(Lease lease) : lease_(std::move(lease)) {}
  explicit Attempt(std::vector<LockInfo> holders) : holders_(std::move(holders)) {}

  explicit operator bool() const noexcept { return lease_.has_value(); }
  bool acquired() const noexcept { return lease_.has_value(); }
  // The lease; throws std::logic_error when the attempt failed.
  Lease& lease();
  // Who held the key at the last try when the attempt failed, every holder; empty when it had
  // no holder to name (freed just as the deadline passed, being handed to a waiter, no
  // majority yet) or when the attempt succeeded.
  const std::vector<LockInfo>& holders() const noexcept { return holders_; }

 private:
  std::optional<Lease> lease_;
  std::vector<LockInfo> holders_;
};

// A distributed mutex meeting the standard TimedLockable requirements, so std::unique_lock,
// std::scoped_lock and std::lock_guard work with it. Each owner (by default each thread) has
// its own holds: lock() twice from one thread re-enters and needs two unlock() calls.
// Thread-safe; movable, not copyable. A moved-from Mutex may only be destroyed or assigned to:
// lock() throws std::logic_error, unlock() logs an error.
class DLOCK_EXPORT Mutex : public detail::TimedTryLock<Mutex> {
 public:
  Mutex(Mutex&&) noexcept;
  Mutex& operator=(Mutex&&) noexcept;
  ~Mutex();

  // Blocks until acquired. Throws dlock::Error on backend failure.
  void lock();
  // One attempt, at most one round trip. False when held by someone else.
  bool try_lock();
  // try_lock_for(duration) and try_lock_until(time_point), of any clock: TimedTryLock.
  // Releases the calling owner's latest hold. Never throws (as Lockable requires); a lease
  // found lost is reported to the loss callback and the log.
  void unlock() noexcept;

  const std::string& key() const noexcept;
  // The calling owner's current lease, or nullptr when it holds nothing.
  const Lease* lease() const;
  // Who held the key when the calling owner's latest try_lock* failed (Attempt::holders);
  // empty before any failed.
  std::vector<LockInfo> last_holders() const;
  // Called when any lease taken through this mutex is lost.
  void on_lost(std::function<void(const LossInfo&)> callback);

 private:
  friend class Client;
  friend class detail::TimedTryLock<Mutex>;
  explicit Mutex(std::shared_ptr<detail::MutexState> state);
  bool try_lock_until_steady(std::chrono::steady_clock::time_point deadline);
  bool try_lock_for_steady(std::chrono::steady_clock::duration timeout);

  std::shared_ptr<detail::MutexState> state_;
};

class DLOCK_EXPORT Client {
 public:
  // Opens a backend by URL: local://[NAME], sqlite://PATH, ... An empty URL means the
  // DLOCK_URL environment variable, or else the embedded default (embedded_default_url()).
  // Throws ConfigurationError for a malformed URL or unknown option, with the fix.
  static Client open(std::string_view url = {}, const ClientOptions& options = {});
  // Uses a backend object directly (custom backends, fault-injecting decorators in tests).
  static Client with_backend(std::shared_ptr<backend::Backend> backend, const ClientOptions& options = {});
  // sqlite:// on a per-user file: $XDG_STATE_HOME/dlock/locks.db, else
  // $HOME/.local/state/dlock/locks.db, else /var/tmp/dlock-UID/locks.db.
  static std::string embedded_default_url();

  Mutex mutex(std::string key, LockOptions options = {}) const;
  // Shared holds (dlock/shared_lock.hpp), on stores with Capabilities::shared_holders (others
  // throw ConfigurationError). A read-write lock: options.mode and options.permits are set by
  // each side.
  SharedMutex shared_mutex(std::string key, LockOptions options = {}) const;
  // A semaphore of `permits` (at least 1) holders of `name`.
  Semaphore semaphore(std::string name, std::uint32_t permits, LockOptions options = {}) const;

  // Blocks until acquired.
  Lease acquire(std::string_view key, const LockOptions& options = {}) const;
  // One attempt: at most one round trip.
  Attempt try_acquire(std::string_view key, const LockOptions& options = {}) const;
  // Waits up to `timeout`; returns within timeout plus about one round trip. timeout <= 0
  // means one attempt.
  Attempt try_acquire_for(std::string_view key, std::chrono::steady_clock::duration timeout,
                          const LockOptions& options = {}) const;
  Attempt try_acquire_until(std::string_view key, std::chrono::steady_clock::time_point deadline,
                            const LockOptions& options = {}) const;

  // Several keys as one lock (dlock/multi_lock.hpp): taken in sorted order whatever order
  // `keys` has, duplicates folded, all or nothing; a waiting call holds none of them while it
  // sleeps. Throws InvalidArgument for an empty list or any bad key before any round trip.
  MultiMutex multi_mutex(std::vector<std::string> keys, LockOptions options = {}) const;
  MultiLease acquire_all(std::vector<std::string> keys, const LockOptions& options = {}) const;
  // One attempt at each key, in order, holding nothing when one is busy.
  MultiAttempt try_acquire_all(std::vector<std::string> keys, const LockOptions& options = {}) const;
  MultiAttempt try_acquire_all_for(std::vector<std::string> keys, std::chrono::steady_clock::duration timeout,
                                   const LockOptions& options = {}) const;
  MultiAttempt try_acquire_all_until(std::vector<std::string> keys, std::chrono::steady_clock::time_point deadline,
                                     const LockOptions& options = {}) const;

  // Releases one hold of an acquisition identified by owner and token, without a Lease object
  // (scripts that acquire in one process and release in another). Returns the holds left
  // (0: that acquisition has ended). Throws LockLostError when it no longer holds the key.
  std::uint32_t release(std::string_view key, std::string_view owner, std::uint64_t token) const;

  // Admin. Every live holder of the key; empty when it is free.
  std::vector<LockInfo> inspect(std::string_view key) const;
  // The holders of up to `limit` keys that start with `prefix`, after key `after` (ListPage).
  ListPage list(std::string_view prefix = {}, std::string_view after = {},
                std::size_t limit = 100) const;
  // Evicts the key's holder with `token`, or without one every holder; returns what each
  // held, empty when none matched (a wrong token evicts nothing). By default
  // (Eviction::delayed) the key stays closed to new holders until each evicted holder has
  // released it or its lease runs out; Eviction::immediate ends their holds at once. An
  // evicted holder learns at its next renewal, or within about a second where the store can
  // notify.
  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction = Eviction::delayed,
                                      std::optional<std::uint64_t> token = std::nullopt) const;
  std::size_t collect_idle() const;
  // What this client did since it opened (see Activity); it adds the same to the store's
  // totals every few seconds and when its last copy goes.
  Activity activity() const;
  // The totals over every client of the store, or nothing where the backend keeps none.
  std::optional<Activity> store_activity() const;
  // Adds what this client counted to the store's totals now, for a process about to end
  // without closing it (_exit). Throws what the backend throws.
  void flush_activity() const;
  // One round trip to the backend; returns how long it took.
  std::chrono::nanoseconds ping() const;

  // 32 hex digits, random per Client::open.
  const std::string& id() const noexcept;
  // The URL with any password replaced by "***".
  const std::string& url() const noexcept;
  std::string_view backend_name() const noexcept;
  // What the store behind this client can do (see backend::Capabilities), for tools that
  // must not guess it from the URL.
  backend::Capabilities capabilities() const noexcept;
  // The owner string a default-owner lock taken by the calling thread uses:
  // NAME@HOST:PID.THREAD/RANDOM (see ClientOptions::name).
  std::string default_owner() const;

 private:
  explicit Client(std::shared_ptr<detail::ClientState> state);
  std::shared_ptr<detail::ClientState> state_;
};

// Parses "500ms", "30s", "1.5s", "5m", "2h" (also "us"); a bare number is seconds ("5", "0.5"),
// as in flock(1). Rounds up to whole milliseconds. Throws InvalidArgument naming the accepted
// forms.
DLOCK_EXPORT std::chrono::milliseconds parse_duration(std::string_view text);

// Where log lines from the library go (warnings about failed releases and renewals). The
// default writes to stderr. Pass nullptr to silence.
enum class LogLevel { debug, info, warning, error };
DLOCK_EXPORT void set_log_handler(std::function<void(LogLevel, std::string_view)> handler);

}  // namespace dlock

// The multi-key and shared-hold types the Client members above return.
#include "dlock/multi_lock.hpp"   // IWYU pragma: export
#include "dlock/shared_lock.hpp"  // IWYU pragma: export
