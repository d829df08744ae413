#pragma once

// mysql:// session mode's shared holds (read-write locks and semaphores; backend.hpp, "Shared
// holds"). As in lease mode (lease_shared.hpp), the key's row names the owner kSharedOwner
// while shared holders hold it, and carries the key's last token. Each shared holder is a row
// of `TABLE_holders` (a memory table, as `TABLE_session`) and holds a GET_LOCK of its own,
// `<bell>:<token>`, on a connection of its own, as an exclusive holder holds the key's bell: a
// holder is live while its session holds that lock (with lock_delay, or evicted with a lock
// delay: until its lease ends), so a holder whose connection ends frees its hold at once.
//
// Memory tables have no transactions. Every shared step (acquire, release, force-release) runs
// under the key's gate, `GET_LOCK('<bell>:gate')`, so that shared steps of a key follow one
// another; the exclusive statements, each atomic on its own, refuse a key whose row names
// kSharedOwner while the gate is held or a holder is live (held_sql()), and a shared step
// takes the key's row with one conditional statement that refuses a live exclusive holder.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/mysql/shared_holds.hpp"

namespace dlock::backends::mysql {

class SessionShared final : public SharedHolds {
 public:
  struct Hooks {
    // Ends a session that holds a lock of the key (KILL).
    std::function<void(Connection&, std::string_view key, std::uint64_t session)> kill;
    // Starts a new epoch when the token floor is missing (a restarted server); true if it did.
    std::function<bool(Connection&)> start_epoch;
  };
  SessionShared(ModeBackend& backend, const std::string& table, bool lock_delay, Hooks hooks);

  // For the exclusive statements: whether a shared step of the key is under way (it holds the
  // key's gate). Parameter: bell.
  static std::string stepping_sql();
  // Whether the key's row is held shared (true while a shared step is under way). Parameters:
  // bell, key, bell.
  static std::string held_sql(const std::string& table, bool lock_delay);
  // The same test without the row's owner, for a statement that may not have the row yet.
  // Parameters: bell, key, bell.
  static std::string busy_sql(const std::string& table, bool lock_delay);

  // `connection` keeps a new holder's lock. A live exclusive holder of the request's owner
  // comes back as Busy with that holder (the caller re-enters it, as its own statements do).
  backend::AcquireResult acquire(Connection& connection, const backend::AcquireRequest& request) override;
  std::vector<LockInfo> holders(Connection& connection, std::string_view key) override;
  bool renew(Connection& connection, const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override;
  Released release(Connection& connection, const backend::LeaseRef& lease) override;
  // An immediate eviction ends the holder's session.
  std::optional<std::vector<LockInfo>> force_release(Connection& connection, std::string_view key, Eviction eviction,
                                                     std::optional<std::uint64_t> token) override;
  // Part of collect_idle: the rows of holders of keys no longer held shared (their sessions
  // ended; a live holder's key is held shared).
  void remove_idle(Connection& connection) { connection.execute(idle_holders_, {}); }

 private:
  // Runs `step` holding the key's gate; nothing when the gate stays taken.
  template <class F>
  auto gated(Connection& connection, const std::string& bell, F&& step) -> std::optional<decltype(step())>;
  std::vector<LockInfo> read_holders(Connection& connection, std::string_view key, const std::string& bell,
                                     std::optional<std::uint32_t>* permits = nullptr,
                                     std::vector<std::uint64_t>* sessions = nullptr);

  Hooks hooks_;
  std::string gate_, ungate_, look_, add_row_, drop_dead_, holders_, reenter_shared_, mark_, claim_readers_, add_holder_,
      renew_, find_hold_, drop_hold_, delete_hold_, evict_hold_, unlock_holder_, settle_, held_shared_, idle_holders_;
};

}  // namespace dlock::backends::mysql
