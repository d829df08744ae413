#pragma once

// The backend interface: what a store must provide for dlock's core to build locks on it.
//
// A backend implements atomic primitives and a wake-up channel; the core (src/core) owns every
// rule built on them: validation, owners, waiting and deadlines, renewal, loss detection and
// the bookkeeping of leases. A backend never sleeps to wait for a lock and never retries an
// acquire on its own (a wake channel may make the one attempt that follows its wake-up).
//
// Threads: every member function may be called concurrently from any thread (user threads and
// the client's renewal thread). Errors are reported by throwing dlock::Error subclasses:
// ConnectionError when the store cannot be reached, OutcomeUnknownError when a request was
// sent but its effect is unknown, BackendError otherwise.
//
// Time: every TTL and expiry is judged by the store's clock (or the host's, for embedded
// stores), never by comparing the caller's wall clock with another machine's.
//
// Two families fit this interface:
//  * lease stores (local, SQLite, MySQL, PostgreSQL, Redis, Redlock): acquire() answers
//    Acquired or Held at once; waiters sleep on the wake channel until a release or until
//    the holder's lease runs out, then try again.
//  * queue stores (ZooKeeper, etcd): acquire() may answer Enqueued with a ticket (the
//    waiter's own queue entry). The core then waits on wake_channel(key, ticket), which
//    fires when the predecessor is gone, and calls acquire() again with the same ticket.
//    When the waiter gives up, the core calls cancel(key, ticket) to remove its entry.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "dlock/export.hpp"
#include "dlock/types.hpp"

namespace dlock::backend {

class WakeChannel;

struct AcquireRequest {
  std::string_view key;
  std::string_view owner;
  std::chrono::milliseconds ttl;
  std::string_view ticket;  // empty, or the ticket of an earlier Enqueued answer
  // The channel this waiting call armed before the attempt (null on a first attempt or a
  // try_lock). A backend may make the attempt through it: MySQL passes the doorbell a woken
  // waiter holds straight to the new holder.
  WakeChannel* wake = nullptr;
};

// The key is ours. A new acquisition has hold_count 1 and a fresh fencing token, strictly
// greater than every token the key ever had (across release, expiry, force-release,
// restarts and clean-up). A re-entry by the same owner while its lease is live keeps the
// token, increments the hold count and extends the lease to `ttl` from now, never shortening
// it: the lease ends at the later of its current end and now + ttl.
struct Acquired {
  std::uint64_t token = 0;
  std::uint32_t hold_count = 1;
  // When the attempt that took the key was sent, if that was before this acquire() call: a
  // backend may take the key inside its wake channel's wait (MySQL's woken waiter does). The
  // lease is timed from the earlier of this and the call.
  std::optional<std::chrono::steady_clock::time_point> sent;
};

// Someone else holds a live lease: report who and for how long (conflict report).
struct Held {
  LockInfo holder;
};

// Queue stores only: the caller is queued behind someone; wait on wake_channel(key, ticket).
struct Enqueued {
  std::string ticket;
};

using AcquireResult = std::variant<Acquired, Held, Enqueued>;

// Identifies one acquisition. Renew and release match owner *and* token, so a late or
// retried call can never touch a newer acquisition of the same key.
struct LeaseRef {
  std::string_view key;
  std::string_view owner;
  std::uint64_t token = 0;
};

// Waking waiters. The core creates one channel per waiting call, calls arm() before every
// acquire attempt and, when the attempt found the key held, wait_until(). A release (or
// force-release) that happens after arm() must make the following wait_until() return
// promptly. Lease expiry needs no wake-up: the core never waits past the holder's ttl_left.
// A release should wake O(1) waiters, not all of them. Every wait_until() is followed by an
// attempt through the channel, so a channel may make that attempt inside the wait and hand
// acquire() its result (see attempts_in_wait).
class DLOCK_EXPORT WakeChannel {
 public:
  virtual ~WakeChannel() = default;
  virtual void arm() = 0;
  // Offered once, right after the channel is made, with the request of the waiting call (every
  // attempt of which has the same key, owner and TTL). A channel that makes the attempt inside
  // each wait returns true; the core then waits at once instead of attempting first, as the
  // attempt inside the wait sees any release since the last one.
  virtual bool attempts_in_wait(const AcquireRequest& /*request*/) { return false; }
  // Blocks until woken, the deadline (steady clock), or spuriously. True when woken.
  virtual bool wait_until(std::chrono::steady_clock::time_point deadline) = 0;
  // The waiter stops without taking the lock after a wake-up it consumed: wake-one channels
  // pass that wake-up on to another waiter here.
  virtual void abandon() noexcept {}
};

// What a store can do, as far as users and tools may rely on it. The CLI and the tests ask a
// backend (Client::capabilities) instead of reading its URL, so a new store, or a new mode of
// one, states its own facts here and nowhere else.
struct Capabilities {
  // Other processes (and, for server stores, other hosts) opening the same URL see the same
  // locks. False for local://, whose store lives inside one process.
  bool spans_processes = false;
  // A hold outlives the client that took it: after that process exits without releasing, the
  // key stays held until its lease runs out (what `dlock acquire` relies on). False where a
  // lock ends with its process or connection (local://, mysql:// session mode).
  bool holds_outlive_the_client = false;
  // A holder whose process dies (its connection ends) frees the key at once, not at the end of
  // its lease (mysql:// session mode).
  bool frees_when_holder_dies = false;
  // LockInfo::held_for is filled in (false: the store never records when a lock was taken).
  bool records_acquisition_time = false;
  // activity() returns the store's totals (false: it keeps none and answers nothing).
  bool keeps_activity = false;
  // inspect() and list() say how many clients wait for a key (LockInfo::waiters).
  bool counts_waiters = false;
  // watch_evictions() is implemented: an evicted holder learns of a force-release within about
  // a second, not at its next renewal. watch_evictions() may still answer false when the push
  // channel cannot be set up at the time (the store is unreachable); holders then learn at
  // their next renewal.
  bool notifies_evictions = false;
};

class DLOCK_EXPORT Backend {
 public:
  virtual ~Backend() = default;

  // Short lowercase name, as in the URL scheme: "sqlite", "local", "mysql".
  virtual std::string_view name() const noexcept = 0;
  // What this store (in its configured mode) can do; constant for the backend's lifetime.
  virtual Capabilities capabilities() const noexcept = 0;
  // Longest key the store accepts; the core rejects longer keys with a clear error.
  virtual std::size_t max_key_bytes() const noexcept { return kMaxKeyBytes; }

  // Acquire-or-report-holder, in one atomic step.
  virtual AcquireResult acquire(const AcquireRequest& request) = 0;
  // Extends a live lease to `ttl` from now. False when the lease is no longer ours.
  virtual bool renew(const LeaseRef& lease, std::chrono::milliseconds ttl) = 0;
  // Drops one hold. Returns the holds left (0: the key is free now), or nothing when the
  // lease was no longer ours (expired, force-released, taken over). The release of a holder
  // evicted with Eviction::delayed frees the key (it acknowledges the loss) and answers nothing.
  virtual std::optional<std::uint32_t> release(const LeaseRef& lease) = 0;

  // Admin: the live holder of a key, if any.
  virtual std::optional<LockInfo> inspect(std::string_view key) = 0;
  // Admin: live locks whose key starts with `prefix`, in key order, after key `after`.
  virtual ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) = 0;
  // Admin: evicts the key's holder, whoever it is; returns what was held, if anything (an
  // already evicted holder counts as held). From then on the holder's renew() answers false
  // and acquire() by its owner is no re-entry.
  //  * Eviction::immediate: the key is free at once (a waiter is woken, as by a release).
  //  * Eviction::delayed: the holder stays recorded with its token and expiry, hold count 0 and
  //    LockInfo::evicted; acquire() by anyone answers Held with that holder until the holder's
  //    release() (same owner and token; answers nothing, as for any lease no longer ours) frees
  //    the key and wakes a waiter, or its lease runs out.
  virtual std::optional<LockInfo> force_release(std::string_view key, Eviction eviction) = 0;
  // Optional push for evicted holders, so they stop within about a second rather than at their
  // next renewal. A backend that can notify calls `evicted(key)` for every force-release of
  // `key` by any client, from any thread but never inside another of its own calls, and
  // returns true; the callback returns at once (the core schedules a check of its own leases
  // of that key with inspect(), so a spurious call costs one round trip). Called once, before
  // any lock is taken; a backend that cannot notify returns false. The callback may run until
  // the backend is destroyed.
  virtual bool watch_evictions(std::function<void(std::string_view key)> /*evicted*/) { return false; }

  // The wake-up channel for waiters on `key` (and, for queue stores, behind `ticket`).
  virtual std::unique_ptr<WakeChannel> wake_channel(std::string_view key, std::string_view ticket) = 0;
  // Queue stores: remove a waiter's queue entry. Lease stores ignore it.
  virtual void cancel(std::string_view /*key*/, std::string_view /*ticket*/) {}

  // The cheapest round trip the store offers (bench's `ping` workload).
  virtual void ping() = 0;
  // Removes state of keys that are free, keeping fencing monotonic. Returns keys removed.
  virtual std::size_t collect_idle() { return 0; }

  // Adds one client's counters to the store's totals, atomically; stores that keep no totals
  // ignore it. Called every few seconds per busy client, so it must not contend with locks.
  virtual void add_activity(const Activity& /*delta*/) {}
  // The store's totals since it was created, or nothing where it keeps none.
  virtual std::optional<Activity> activity() { return std::nullopt; }
};

}  // namespace dlock::backend
