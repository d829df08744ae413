#include "backends/redlock/server_bell.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "backends/redis/keys.hpp"

namespace dlock::backends::redlock {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

}  // namespace

void ServerBell::arm() {
  if (server_) return;
  for (std::size_t i = 0; i < servers_.size() && !server_; ++i) {
    if (servers_.left_out(i)) continue;
    try {
      connection_.emplace(servers_.take(i));
      register_here();
      server_ = i;
    } catch (const redis::RedisError& e) {
      if (e.connection) servers_.failed(i, e);
      connection_.reset();
    }
  }
}

bool ServerBell::wait_until(Clock::time_point deadline) {
  if (!server_) {
    // Registered nowhere: the attempt's holder lease or back-off bounds the wait.
    std::this_thread::sleep_until(std::min(deadline, Clock::now() + redis::kHeartbeat));
    return false;
  }
  try {
    for (;;) {
      auto now = Clock::now();
      if (now - registered_ >= redis::kHeartbeat) register_here();
      now = Clock::now();
      const auto until = std::min(deadline, now + redis::kHeartbeat);
      if (until <= now) return false;
      // Redis ends a BLPOP at its timeout on its timer, 10 times a second by default: a back-off
      // of a few ms would last up to 100 ms, and every waiter backs off at once when no one
      // has a majority. A wait that short (with the core's margin over it) sleeps here, then
      // takes a bell rung meanwhile.
      if (until - now <= 2 * kMostBackoff) {
        std::this_thread::sleep_until(until);
        const bool rung = !redis::is_nil((*connection_)->command({"LPOP", keys_.bell}).get());
        woken_ = woken_ || rung;
        return rung;
      }
      const auto wait = std::max(std::chrono::ceil<milliseconds>(until - now), milliseconds(1));
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.3f", static_cast<double>(wait.count()) / 1000.0);
      if (!redis::is_nil((*connection_)->blocking({"BLPOP", keys_.bell, seconds}, wait).get())) {
        woken_ = true;
        return true;
      }
      if (Clock::now() >= deadline) return false;
    }
  } catch (const redis::RedisError& e) {
    // The next arm registers again, on a server that answers.
    if (e.connection) servers_.failed(*server_, e);
    server_.reset();
    connection_.reset();
    return false;
  }
}

void ServerBell::register_here() {
  servers_.run(**connection_, kSleep, {keys_.sleepers}, {id_, alive_ms_});
  registered_ = Clock::now();
}

void ServerBell::run_leave(bool pass, bool stay) {
  servers_.run(**connection_, kLeave, {keys_.sleepers, keys_.bell}, {id_, alive_ms_, pass ? "1" : "0", stay ? "1" : "0"});
}

void ServerBell::pass_on() noexcept {
  if (!woken_ || !server_) return;
  woken_ = false;
  try {
    run_leave(true, true);
  } catch (...) {
    // The bell is lost (waiters still attempt within their holder's lease or back-off); the
    // next arm registers again.
    server_.reset();
    connection_.reset();
  }
}

void ServerBell::leave(bool pass) noexcept {
  if (!server_) return;
  server_.reset();
  try {
    run_leave(pass, false);
  } catch (...) {
    // Unreachable: the registration lapses after kAlive.
  }
  connection_.reset();
}

}  // namespace dlock::backends::redlock
