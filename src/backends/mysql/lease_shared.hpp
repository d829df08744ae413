#pragma once

// mysql:// lease mode's shared holds (read-write locks and semaphores; backend.hpp, "Shared
// holds"). The key's row stays the one place every acquisition of the key goes through: its
// token is the key's last, and while shared holders hold the key it names the owner
// kSharedOwner, with the latest of their expiries, so the exclusive statements (unchanged, and
// as fast) find it held and take it over only once every shared holder's lease has run out.
// The holders themselves are rows of `TABLE_shared`, keyed (key, token); a waiting writer's
// claim is a row of `TABLE_claim`; waiting readers' claim on the exclusive holder's token is
// the key row's `readers_until`, which the exclusive statements honour and a shared grant
// ends. Every shared step is one transaction that locks the key's
// row first, so it is atomic with the exclusive statements, which lock that row too.
// A holder's session keeps a GET_LOCK named after the key's bell and its token while it holds
// (the one that takes it keeps the connection), so that a waiting writer sleeps on it
// (DoorbellChannel) rather than polls.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/mysql/shared_holds.hpp"

namespace dlock::backends::mysql {

class LeaseShared final : public SharedHolds {
 public:
  LeaseShared(ModeBackend& backend, const std::string& table);

  // In one transaction: a re-entry (of the owner's shared hold, or of its exclusive one: a
  // writer may also read), a new shared hold, or Busy.
  backend::AcquireResult acquire(Connection& connection, const backend::AcquireRequest& request) override;
  // None unless the key's row is kSharedOwner's.
  std::vector<LockInfo> holders(Connection& connection, std::string_view key) override;
  bool renew(Connection& connection, const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override;
  Released release(Connection& connection, const backend::LeaseRef& lease) override;
  std::optional<std::vector<LockInfo>> force_release(Connection& connection, std::string_view key, Eviction eviction,
                                                     std::optional<std::uint64_t> token) override;
  // Gives up the lock the session on `connection` keeps for a shared hold that was lost.
  void drop_holder_lock(Connection& connection, const backend::LeaseRef& lease);
  // Part of collect_idle's transaction: leases and claims that ran out by `cutoff`.
  void remove_idle(Connection& connection, std::string_view cutoff);

 private:
  // The live shared holders, inside a transaction that locked the key's row (with their
  // permits, when asked).
  std::vector<LockInfo> locked_holders(Connection& connection, std::string_view key,
                                       std::optional<std::uint32_t>* permits = nullptr);
  // After a shared hold ended: the row keeps the latest expiry left, or is freed.
  void settle(Connection& connection, std::string_view key);

  std::string lock_key_, add_row_, holders_, locked_holders_, reenter_exclusive_, reenter_shared_, add_holder_,
      mark_shared_, claim_readers_, renew_, find_hold_, drop_hold_, delete_hold_, evict_hold_, settle_, held_shared_, drop_holder_lock_, idle_holds_,
      idle_claims_;
};

}  // namespace dlock::backends::mysql
