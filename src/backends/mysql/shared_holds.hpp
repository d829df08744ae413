#pragma once

// What the shared holds (read-write locks, semaphores) of lease and session modes have in
// common: the owner a key's row names while they hold it, backend.hpp's rules for a shared
// request, and the interface their backends call (lease_shared.hpp, session_shared.hpp).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/mysql/common.hpp"

namespace dlock::backends::mysql {

// The owner of a key's row while shared holders hold it (lease and session modes): with a
// space, which no owner has. The holders are rows of a table of their own.
inline constexpr std::string_view kSharedOwner = " shared";
// How soon to look again at a key whose holders are none to name (a shared step under way, a
// woken waiter taking over).
inline constexpr std::chrono::milliseconds kSharedRecheck{50};

// backend.hpp's rules for a shared request, once the key has no live exclusive holder, from its
// live shared holders, their permits and a live writer's claim's time left (which a reader that
// waited behind a writer passes): the owner's hold to re-enter, or Busy, or neither (a new
// shared hold). Throws InvalidArgument when the permits
// differ. `none_left` is how soon to look again at a key whose holders are none to name.
struct SharedVerdict {
  const LockInfo* reenter = nullptr;
  std::optional<backend::Busy> busy;
};
SharedVerdict judge_shared(const backend::AcquireRequest& request, std::vector<LockInfo>& holders,
                           std::optional<std::uint32_t> permits, std::optional<std::chrono::milliseconds> claim_left,
                           std::chrono::milliseconds none_left);
// The soonest a holder's lease ends, or `none` without holders.
std::chrono::milliseconds soonest_end(const std::vector<LockInfo>& holders, std::chrono::milliseconds none);

// The shared holds of lease and session modes (lease_shared.hpp, session_shared.hpp): what
// their backends ask when a request or a lease is shared, or a key is held shared.
class SharedHolds {
 public:
  virtual ~SharedHolds() = default;
  // One shared attempt on `connection`.
  virtual backend::AcquireResult acquire(Connection& connection, const backend::AcquireRequest& request) = 0;
  // An exclusive request found the key held shared (its row's token `token`): Busy with the
  // shared holders, and from a waiting writer, its claim (a row of `TABLE_claim`).
  backend::Busy writer_refused(Connection& connection, const backend::AcquireRequest& request, std::uint64_t token);
  // A waiting writer's claim on the key (its token `token` or any later one, as it is now).
  void claim_for_writer(Connection& connection, std::string_view key, std::uint64_t token);
  // A new shared holder (token `now`) let in past a live writer's claim (a reader that waited
  // behind a writer): the claim moves to the new token, which it would otherwise no longer
  // cover, so that only an exclusive grant ends it. One statement, not retried: it may be part
  // of a transaction.
  void carry_claim(Connection& connection, std::string_view key, std::uint64_t was, std::uint64_t now);
  // The live shared holders of the key.
  virtual std::vector<LockInfo> holders(Connection& connection, std::string_view key) = 0;
  virtual bool renew(Connection& connection, const backend::LeaseRef& lease, std::chrono::milliseconds ttl) = 0;
  struct Released {
    bool found = false;                 // the lease was a live shared hold
    std::optional<std::uint32_t> left;  // as Backend::release (nothing: it was evicted)
  };
  virtual Released release(Connection& connection, const backend::LeaseRef& lease) = 0;
  // Nothing when the key is not held shared.
  virtual std::optional<std::vector<LockInfo>> force_release(Connection& connection, std::string_view key,
                                                             Eviction eviction, std::optional<std::uint64_t> token) = 0;
  // The mode's `list`, exclusive and shared holders (list_page's form, with a column that is 1
  // for a shared holder).
  const std::string& list_bounded() const { return list_bounded_; }
  const std::string& list_open() const { return list_open_; }

 protected:
  // `key_table` holds the keys' rows (their tokens).
  SharedHolds(ModeBackend& backend, const std::string& table, const std::string& key_table);

  ModeBackend& backend_;
  std::string list_bounded_, list_open_;

 private:
  std::string claim_, carry_claim_;
};

}  // namespace dlock::backends::mysql
