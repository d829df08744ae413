#pragma once

// mysql:// lease mode's shared holds (read-write locks and semaphores; backend.hpp, "Shared
// holds"). The key's row stays the one place every acquisition of the key goes through: its
// token is the key's last, and while shared holders hold the key it names the owner
// kSharedOwner, with the latest of their expiries, so the exclusive statements (unchanged, and
// as fast) find it held and take it over only once every shared holder's lease has run out.
// The holders themselves are rows of `TABLE_shared`, keyed (key, token); a waiting writer's
// claim is a row of `TABLE_claim`. Every shared step is one transaction that locks the key's
// row first, so it is atomic with the exclusive statements, which lock that row too.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/mysql/common.hpp"

namespace dlock::backends::mysql {

class LeaseShared {
 public:
  LeaseShared(ModeBackend& backend, const std::string& table);

  // One shared attempt, in one transaction: a re-entry (of the owner's shared hold, or of its
  // exclusive one: a writer may also read), a new shared hold, or Busy.
  backend::AcquireResult acquire(Connection& connection, const backend::AcquireRequest& request);
  // An exclusive request found the key held shared (its row's token `token`): Busy with the
  // shared holders, and from a waiting writer, its claim.
  backend::Busy writer_refused(Connection& connection, const backend::AcquireRequest& request, std::uint64_t token);
  // The live shared holders of the key (none unless its row is kSharedOwner's).
  std::vector<LockInfo> holders(Connection& connection, std::string_view key);
  bool renew(Connection& connection, const backend::LeaseRef& lease, std::chrono::milliseconds ttl);
  struct Released {
    bool found = false;                 // the lease was a live shared hold
    std::optional<std::uint32_t> left;  // as Backend::release (nothing: it was evicted)
  };
  Released release(Connection& connection, const backend::LeaseRef& lease);
  // Nothing when the key is not held shared.
  std::optional<std::vector<LockInfo>> force_release(Connection& connection, std::string_view key, Eviction eviction,
                                                     std::optional<std::uint64_t> token);
  // lease mode's `list`, exclusive and shared holders (list_page's form; column 6 is 1 for a
  // shared holder).
  const std::string& list_bounded() const { return list_bounded_; }
  const std::string& list_open() const { return list_open_; }
  // Parts of collect_idle's transaction: leases and claims that ran out by `cutoff`.
  void remove_idle(Connection& connection, std::string_view cutoff);

 private:
  // The live shared holders, inside a transaction that locked the key's row (with their
  // permits, when asked).
  std::vector<LockInfo> locked_holders(Connection& connection, std::string_view key,
                                       std::optional<std::uint32_t>* permits = nullptr);
  // After a shared hold ended: the row keeps the latest expiry left, or is freed.
  void settle(Connection& connection, std::string_view key);

  ModeBackend& backend_;
  std::string lock_key_, add_row_, holders_, locked_holders_, reenter_exclusive_, reenter_shared_, add_holder_,
      mark_shared_, claim_, renew_, find_hold_, drop_hold_, delete_hold_, evict_hold_, settle_, held_shared_,
      list_bounded_, list_open_, idle_holds_, idle_claims_;
};

}  // namespace dlock::backends::mysql
