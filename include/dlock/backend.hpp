#pragma once

// The backend interface: what a store must provide for dlock's core to build locks on it.
//
// A backend implements atomic primitives and a way to wait; the core (src/core) owns every
// rule built on them: validation, owners, waiting and deadlines, renewal, loss detection and
// the bookkeeping of leases. A backend never sleeps to wait for a lock and never retries an
// acquire on its own (a waiter may take the key inside its wait, as the attempt that follows
// would).
//
// Threads: every member function may be called concurrently from any thread (user threads and
// the client's renewal thread). Errors are reported by throwing dlock::Error subclasses:
// ConnectionError when the store cannot be reached, OutcomeUnknownError when a request was
// sent but its effect is unknown, BackendError otherwise.
//
// Time: every TTL and expiry is judged by the store's clock (or the host's, for embedded
// stores), never by comparing the caller's wall clock with another machine's.
//
// Waiting is one protocol for every store. A try-once call makes one acquire(). A call that may
// wait opens a Waiter, the call's presence at the key, and drives it: attempt(), and while the
// answer is Busy and time is left, wait_until() and attempt() again; then it drops the Waiter.
//  * lease stores (local, SQLite, MySQL, PostgreSQL, Redis, Redlock): an attempt answers at
//    once; between attempts the waiter sleeps on whatever the store's release rings (a futex,
//    GET_LOCK, BLPOP). src/backends/bell_waiter.hpp builds such a waiter from acquire() and a
//    bell.
//  * queue stores (ZooKeeper, etcd): the first attempt enqueues the waiter (its own queue
//    entry), later attempts look whether it is first, and the wait ends when its predecessor
//    is gone. Dropping the waiter removes the entry.
// Either kind may take the key inside wait_until(); the attempt that follows then answers
// Acquired with the time that take was sent.
//
// Losses are the core's rule; a store only reports what it sees (Events): a force-release, an
// acquisition it knows is gone, or everything its session held.
//
// Shared holds (Capabilities::shared_holders; docs/design.md, "Read-write locks and
// semaphores"). A key has no holder, one exclusive holder, or shared holders, each with its own
// owner, token, hold count and lease. In one atomic step, acquire() grants:
//  * exclusive: when the key has no live holder (an evicted one counts as live);
//  * shared with permits P: when the key has no live exclusive holder, fewer than P live shared
//    holders (P = 0: no limit, a read-write lock's readers), and no live writer's claim;
//  * a re-entry: the owner's live, unevicted hold of either mode, when asked for either mode
//    (a writer may also read), except an exclusive request by a shared holder, which is Busy
//    (the core refuses upgrades before asking).
// The permits of a key are set by its first shared holder and hold while it has shared holders:
// a shared request with other permits throws InvalidArgument naming both counts.
// Writers are not starved. On a lease store, an exclusive request from a Waiter that is Busy
// places the key's writer's claim, which refuses new shared holders (not re-entries) for
// kWriterClaim; a writer's waiting attempts renew it (their Busy::retry_within is at most half
// of it) and the writer's grant ends it. A refused shared request is Busy with the live holders
// (none, when only the claim refused it) and retry_within at most the claim's remaining time.
// Nor are readers, by a writer that takes the key back the moment it lets go: a shared request
// from a Waiter that a live exclusive holder refused places the key's readers' claim on that
// holder's token, for kWriterClaim (renewed by their waiting attempts); while the key's latest
// grant is still that token, a new exclusive holder is refused (Busy with no holders when the
// key is free). The key's next grant ends it. The readers who waited for that holder then enter
// together: a request with AcquireRequest::waited_behind set is not refused by a writer's claim,
// so writers and batches of readers take turns. A writer's grant that ends a claim which held
// back waiting readers wakes them (unless their wait ends by itself then), so that they find
// the writer and queue behind it.
// A queue store needs no claim: a shared entry holds only when no exclusive entry is ahead of
// it (and fewer than its permits are), so a writer keeps its place in line. (redis:// without
// fair=true keeps no claim yet, a known gap: docs/design.md.)
// A release, expiry or force-release that ends a hold rings a waiter, as for the mutex.
// Fencing is per key, whatever the mode: every new acquisition's token is above every token the
// key had before, so a writer's token is above every earlier reader's and writer's.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dlock/errors.hpp"
#include "dlock/export.hpp"
#include "dlock/types.hpp"

namespace dlock::backend {

struct AcquireRequest {
  std::string_view key;
  std::string_view owner;
  std::chrono::milliseconds ttl;
  // A store whose Capabilities::shared_holders is false is only ever asked for exclusive.
  LockMode mode = LockMode::exclusive;
  // Shared requests: the most shared holders the key admits (a semaphore's permits); 0 for no
  // limit (readers). Always 0 for exclusive requests.
  std::uint32_t permits = 0;
  // Sent by a Waiter's attempt (a call that will wait), never by a try-once acquire(): an
  // exclusive request that is Busy places the writer's claim, a shared one that an exclusive
  // holder refused places the readers' claim (see the top of this file).
  bool waiting = false;
  // A waiting shared request whose previous attempt was refused by an exclusive holder: that
  // holder's token (0: none). Such a reader is not refused by a writer's claim.
  std::uint64_t waited_behind = 0;
};

// What a shared request gets when the key's shared holds were taken with another number of
// permits (`held`): every client of one semaphore or read-write lock must agree. `state` says
// what has that number: "held", or "waited for" where a waiting reader's node carries it.
DLOCK_EXPORT InvalidArgument permits_disagree(std::string_view key, std::uint32_t held, std::uint32_t asked,
                                              std::string_view state = "held");

// How long a waiting writer's claim refuses new shared holders without a renewing attempt.
inline constexpr std::chrono::milliseconds kWriterClaim{2000};

// The key is ours. A new acquisition has hold_count 1 and a fresh fencing token, strictly
// greater than every token the key ever had (across release, expiry, force-release,
// restarts and clean-up). A re-entry by the same owner while its lease is live keeps the
// token, increments the hold count and extends the lease to `ttl` from now, never shortening
// it: the lease ends at the later of its current end and now + ttl.
struct Acquired {
  std::uint64_t token = 0;
  std::uint32_t hold_count = 1;
  // When the request that took the key was sent, if before this attempt: a waiter may take the
  // key inside wait_until() (MySQL's heir handoff, Redis's fair queue). The lease is timed from
  // the earlier of this and the attempt.
  std::optional<std::chrono::steady_clock::time_point> sent;
  // The lease the store grants, when shorter than the request's TTL: a session store's lease is
  // its session, which the ensemble may end that long after it last heard from the client. The
  // core times validity and renewals by it.
  std::optional<std::chrono::milliseconds> lease;
};

// The key is not ours now. Never a made-up holder: `holders` are the live holders the store
// saw, or none while the key has none to name (being handed to a waiter, no majority yet).
struct Busy {
  std::vector<LockInfo> holders;
  // Attempt again within this even if nothing wakes the waiter: the holder's remaining lease
  // (expiry rings no bell), or how soon a key between holders settles.
  std::chrono::milliseconds retry_within{0};
};

using AcquireResult = std::variant<Acquired, Busy>;

// The waited_behind of a waiter's next attempt, from the `result` of its last one.
inline std::uint64_t waited_behind(LockMode mode, const AcquireResult& result) {
  const auto* busy = std::get_if<Busy>(&result);
  const bool behind_writer = mode == LockMode::shared && busy && busy->holders.size() == 1 &&
                             busy->holders.front().mode == LockMode::exclusive;
  return behind_writer ? busy->holders.front().token : 0;
}

// A set's first busy request (Backend::acquire_set): its index and the Busy it got.
struct SetBusy {
  std::size_t index = 0;
  Busy busy;
};

// One Acquired per request of the set, in order; or SetBusy, and nothing was taken.
using AcquireSetResult = std::variant<std::vector<Acquired>, SetBusy>;

// Identifies one acquisition. Renew and release match owner *and* token, so a late or
// retried call can never touch a newer acquisition of the same key.
struct LeaseRef {
  std::string_view key;
  std::string_view owner;
  std::uint64_t token = 0;
};

// One waiting call's presence at a key, for its whole life (see the top of this file). Every
// attempt is for the request the waiter was opened with. Used by one thread at a time.
class DLOCK_EXPORT Waiter {
 public:
  // The call ends, with the key or without it: a queue entry is removed, a wake-up taken but
  // not used is passed to another waiter, and a key taken inside a wait but never reported by
  // attempt() is released. Never throws.
  virtual ~Waiter() = default;
  // One attempt; the first comes right after the waiter is opened.
  virtual AcquireResult attempt() = 0;
  // Blocks until the key may have become free since the last attempt() began (a release, a
  // force-release, a predecessor gone), the deadline (steady clock), or spuriously. A waiter
  // that cannot tell returns at once; the core never waits past Busy::retry_within.
  virtual void wait_until(std::chrono::steady_clock::time_point deadline) = 0;
};

// How a store tells the core what it saw, as it happens (Backend::watch). Each call returns
// at once (the core acts on its own threads) and may come from any thread, never from inside
// another of the backend's calls.
class DLOCK_EXPORT Events {
 public:
  virtual ~Events() = default;
  // `key` was force-released by some client. The core looks for its own leases of the key
  // among inspect()'s holders, so a spurious or late call costs one round trip and nothing else.
  virtual void evicted(std::string_view key) = 0;
  // This acquisition is gone for certain (its node was deleted, its connection ended): the
  // core reports the loss at once instead of at the next renewal.
  virtual void lost(const LeaseRef& lease, std::string_view why) = 0;
  // Everything this backend held is gone (its session expired): every lease of the client.
  virtual void all_lost(std::string_view why) = 0;
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
  // A lock lasts as long as its holder's connection or session, which the client keeps alive
  // by itself (mysql:// session mode, zookeeper://): a holder that stops renewing but lives
  // keeps the key, its TTL bounds only how long it trusts the lock without hearing from the
  // store, and LockInfo::ttl_left is how long the key may stay held after the holder's
  // session ends rather than a countdown. False where an unrenewed lease runs out by itself.
  bool lease_is_the_session = false;
  // LockInfo::held_for is filled in (false: the store never records when a lock was taken).
  bool records_acquisition_time = false;
  // inspect() and list() say how many clients wait for a key (LockInfo::waiters).
  bool counts_waiters = false;
  // inspect() and list() name the waiting owners in the order they will get the key
  // (LockInfo::queue).
  bool names_waiters = false;
  // A key may have several holders at once, in LockMode::shared (see LockInfo). False: every
  // holder is exclusive, and inspect() and list() name at most one per key.
  bool shared_holders = false;
  // watch() pushes force-releases: an evicted holder learns of a force-release within about
  // a second, not at its next renewal. watch() may still answer false when the push
  // channel cannot be set up at the time (the store is unreachable); holders then learn at
  // their next renewal.
  bool notifies_evictions = false;
};

// What clients did (Activity), kept by a store for `dlock serve`'s /metrics: a concern of its
// own beside locking (Backend::activity), which a store may leave out.
class DLOCK_EXPORT ActivityLedger {
 public:
  virtual ~ActivityLedger() = default;
  // Adds one client's counters to the totals, atomically. Called every few seconds per busy
  // client, so it must not contend with locks.
  virtual void add(const Activity& delta) = 0;
  // The totals since the store was created.
  virtual Activity totals() = 0;
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

  // One attempt, in one atomic step: Acquired, or Busy with the holders. Try-once calls.
  virtual AcquireResult acquire(const AcquireRequest& request) = 0;
  // A waiting call's presence at the key (see Waiter). Opening one costs no round trip: its
  // first attempt() is the call's first attempt.
  virtual std::unique_ptr<Waiter> waiter(const AcquireRequest& request) = 0;
  // Extends a live lease to `ttl` from now. False when the lease is no longer ours.
  virtual bool renew(const LeaseRef& lease, std::chrono::milliseconds ttl) = 0;
  // Drops one hold. Returns the holds left (0: this acquisition has ended), or nothing when the
  // lease was no longer ours (expired, force-released, taken over). The release of a holder
  // evicted with Eviction::delayed frees the key (it acknowledges the loss) and answers nothing.
  virtual std::optional<std::uint32_t> release(const LeaseRef& lease) = 0;

  // Several keys in one request, where the store can (Client::acquire_all): one try-once
  // attempt at every request (distinct keys, sorted), in one atomic step, all granted or none.
  // Nothing where the store cannot take this set so; the core then takes the keys one by one.
  virtual std::optional<AcquireSetResult> acquire_set(std::span<const AcquireRequest> /*requests*/) {
    return std::nullopt;
  }
  // Drops one hold of each lease in one request, where the store can: one release() answer
  // per lease, in order. Nothing where it cannot (for this set); the core then releases them
  // one by one.
  virtual std::optional<std::vector<std::optional<std::uint32_t>>> release_set(
      std::span<const LeaseRef> /*leases*/) {
    return std::nullopt;
  }

  // Admin: every live holder of a key (an evicted one included); empty when the key is free.
  virtual std::vector<LockInfo> inspect(std::string_view key) = 0;
  // Admin: the live holders of keys that start with `prefix` and sort after key `after`, in
  // key order (see ListPage): at most `limit` keys, each with all its holders.
  virtual ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) = 0;
  // Admin: evicts the key's holder with `token`, or without a token every holder of the key;
  // returns what each evicted holder held (an already evicted holder counts as held), empty
  // when none matched. From then on an evicted holder's renew() answers false and acquire()
  // by its owner is no re-entry. Per evicted holder:
  //  * Eviction::immediate: its hold ends at once (a key left free wakes a waiter, as a release
  //    does).
  //  * Eviction::delayed: the holder stays recorded with its token and expiry, hold count 0 and
  //    LockInfo::evicted; acquire() by anyone answers Busy with that holder until the holder's
  //    release() (same owner and token; answers nothing, as for any lease no longer ours) ends
  //    it, waking a waiter if the key is free, or its lease runs out.
  virtual std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                              std::optional<std::uint64_t> token) = 0;
  // Called once, before any lock is taken: where to report what the store sees. The backend
  // keeps `events` (and may call it) until it is destroyed. Returns whether force-releases are
  // pushed (Events::evicted, within about a second); Capabilities::notifies_evictions says
  // whether they can be, and false here means the push could not be set up now (the store is
  // unreachable): evicted holders then learn at their next renewal.
  virtual bool watch(std::shared_ptr<Events> /*events*/) { return false; }

  // The cheapest round trip the store offers (bench's `ping` workload).
  virtual void ping() = 0;
  // Removes state of keys that are free, keeping fencing monotonic. Returns keys removed.
  virtual std::size_t collect_idle() { return 0; }

  // Where the store keeps activity totals, or null where it keeps none; as long-lived as the
  // backend.
  virtual ActivityLedger* activity() noexcept { return nullptr; }
};

}  // namespace dlock::backend
