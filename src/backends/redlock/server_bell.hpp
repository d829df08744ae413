#pragma once

// The bell a redlock:// waiter sleeps on between attempts: a registration among the key's
// sleepers on one server, on a connection of its own, and a BLPOP on the key's bell there.
// Releases ring the bell on every server where a waiter is registered (lua/bells.lua). Used by
// one waiting call, on its thread.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "backends/bell_waiter.hpp"
#include "backends/redis/connection.hpp"
#include "backends/redlock/common.hpp"
#include "backends/redlock/servers.hpp"

namespace dlock::backends::redlock {

class ServerBell final : public Bell {
 public:
  // `id` names this waiter among the sleepers; `alive_ms`, how long a registration lasts
  // without a heartbeat.
  ServerBell(Servers& servers, Keys keys, std::string id, std::string alive_ms)
      : servers_(servers), keys_(std::move(keys)), id_(std::move(id)), alive_ms_(std::move(alive_ms)) {}
  ~ServerBell() override { leave(false); }
  ServerBell(const ServerBell&) = delete;
  ServerBell& operator=(const ServerBell&) = delete;

  // Registers before the attempt that follows, so a release after it rings for this waiter.
  void arm() override;
  bool wait_until(std::chrono::steady_clock::time_point deadline) override;
  // Rings again for another waiter, staying registered: this waiter keeps its place.
  void pass_on() noexcept override;
  void abandon() noexcept override { leave(woken_); }

 private:
  void register_here();
  // Drops the registration, passing on a bell this waiter took and will not use.
  void leave(bool pass) noexcept;
  // leave.lua: pass a bell on, staying registered or not.
  void run_leave(bool pass, bool stay);

  Servers& servers_;
  Keys keys_;
  std::string id_;
  std::string alive_ms_;
  std::optional<std::size_t> server_;  // where this waiter is registered
  std::optional<redis::Pool::Lease> connection_;
  std::chrono::steady_clock::time_point registered_;
  // A wait took a bell, not passed on since. Kept through waits that end without one: an
  // attempt that backs off (a release seen by some servers only) neither uses nor passes it,
  // and the attempt after the back-off may have to pass it (to the writer a claim keeps out).
  bool woken_ = false;
};

}  // namespace dlock::backends::redlock
