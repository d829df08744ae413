#include "backends/postgres/listen_bell.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "core/stable_hash.hpp"

namespace dlock::backends::postgres {
namespace {

constexpr std::chrono::milliseconds kRetryPause{50};

}  // namespace

std::string key_channel(const std::string& table, std::string_view key) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(core::stable_hash(table + '\n' + std::string(key))));
  return "dlock_" + std::string(hex);
}

std::int64_t key_slot(const std::string& table, std::string_view key) {
  return static_cast<std::int64_t>(core::stable_hash("slot\n" + table + '\n' + std::string(key)));
}

ListenBell::ListenBell(Pool& pool, const Settings& settings, std::string_view key)
    : pool_(pool),
      channel_(key_channel(settings.table, key)),
      slot_(std::to_string(key_slot(settings.table, key))) {}

ListenBell::~ListenBell() { leave_line(); }

void ListenBell::pass_on() noexcept { leave_line(); }

void ListenBell::leave_line() noexcept {
  if (queued_) {
    // Still asking for the slot: the server drops the request with the session.
    drop_connection();
    return;
  }
  if (!connection_ || !next_in_line_) return;
  next_in_line_ = false;
  try {
    // The next waiter gets the slot as the server reads this.
    (*connection_)->run("UNLISTEN *; SELECT pg_advisory_unlock_all()");
    (*connection_)->drop_notifications();
  } catch (const PgError&) {
    drop_connection();  // closed, and its slot freed with it
  }
}

void ListenBell::drop_connection() noexcept {
  if (connection_) (*connection_)->discard();  // a slot it may hold goes with it
  connection_.reset();
  next_in_line_ = false;
  queued_ = false;
}

Connection* ListenBell::connection() {
  if (queued_) return nullptr;
  if (connection_ && (*connection_)->broken()) drop_connection();
  if (!connection_) connection_.emplace(pool_.take());
  return &**connection_;
}

void ListenBell::arm() {
  if (!next_in_line_) return;
  // What was rung before this attempt, the attempt sees.
  try {
    (*connection_)->drop_notifications();
  } catch (const PgError&) {
    drop_connection();  // the next wait joins the line again
  }
}

bool ListenBell::wait_until(std::chrono::steady_clock::time_point deadline) {
  try {
    if (next_in_line_) return (*connection_)->wait_for_notification(deadline);
    if (!queued_) {
      connection()->send("SELECT pg_advisory_lock($1::bigint)", {slot_});
      queued_ = true;
    }
    // A deadline (the holder's lease, a claim to renew) ends this wait, not the place in line:
    // the request stays queued in the server, and attempts meanwhile use pooled connections.
    if (!(*connection_)->finish_sent(deadline)) return false;
    queued_ = false;
    (*connection_)->run("LISTEN " + channel_);
    next_in_line_ = true;
    // The key may have been freed while this waiter queued: look again before sleeping.
    return true;
  } catch (const PgError&) {
    // The waiter's connection broke (killed, a restart) or cannot be made: the call goes on,
    // its attempts reporting what they find. A short pause keeps a server that refuses only
    // the waiter's connection from turning this into a busy loop.
    drop_connection();
    std::this_thread::sleep_until(std::min(deadline, std::chrono::steady_clock::now() + kRetryPause));
    return false;
  }
}

}  // namespace dlock::backends::postgres
