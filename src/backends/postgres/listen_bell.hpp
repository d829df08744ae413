#pragma once

// How a waiter of lease mode sleeps: one release wakes one waiter, without polling.
//
// Each key has a slot, a session advisory lock (pg_advisory_lock of a hash of the table and the
// key), and a channel (LISTEN/NOTIFY). A waiter asks for the slot on a connection of its own;
// the server grants it to one waiter at a time, in the order they asked, and the others wait
// for it inside the server. The slot's holder, the key's next in line, LISTENs on the key's
// channel before its next attempt. A waiter's attempt that finds the key busy marks the row
// `waiting` in the same statement, and the release that frees a row so marked notifies the
// channel: only the slot's holder hears it. When it takes the key, or gives up, it unlistens and
// gives the slot back, and the server grants it to the next waiter. A waiter whose connection
// ends frees the slot with it.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "backends/bell_waiter.hpp"
#include "backends/postgres/common.hpp"
#include "backends/postgres/pool.hpp"

namespace dlock::backends::postgres {

// The channel a key's release notifies, and its waiters' slot.
std::string key_channel(const std::string& table, std::string_view key);
std::int64_t key_slot(const std::string& table, std::string_view key);

class ListenBell final : public Bell {
 public:
  // `pool`: where the waiter's connection comes from, and goes back to with no slot held and
  // nothing listened to.
  ListenBell(Pool& pool, const Settings& settings, std::string_view key);
  ~ListenBell() override;
  ListenBell(const ListenBell&) = delete;
  ListenBell& operator=(const ListenBell&) = delete;

  // The waiter's own connection, for its attempts too: one connection per waiting call. Taken
  // from the pool on first use, and again after it broke. Null while it asks for the slot:
  // attempts then take a pooled one.
  Connection* connection();

  // Holds the key's slot: the next waiter the key's release wakes.
  bool next_in_line() const noexcept { return next_in_line_; }

  void arm() override;
  bool wait_until(std::chrono::steady_clock::time_point deadline) override;
  // Gives the slot to the next in line (this waiter asks again at its next wait): after a
  // shared grant, and when a claim keeps this waiter out of a key no holder will free.
  void pass_on() noexcept override;

 private:
  void drop_connection() noexcept;
  void leave_line() noexcept;

  Pool& pool_;
  const std::string channel_;
  const std::string slot_;
  std::optional<Pool::Lease> connection_;
  bool queued_ = false;        // the connection waits in the server for the slot
  bool next_in_line_ = false;  // holds the slot and listens
};

}  // namespace dlock::backends::postgres
