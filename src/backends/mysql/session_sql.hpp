#pragma once

// mysql:// session mode's statements (session_mode.cpp), built once per client for its table
// and its lock_delay option.

#include <string>

namespace dlock::backends::mysql {

struct SessionSql {
  SessionSql(const std::string& table, bool lock_delay);

  std::string take, acquire, reentered, conflict, free, reenter_elsewhere, renew, release, drop_bell, drop_expired, inspect,
      session_of, force_release, evict, orphaned, settle, raise_floor, delete_idle, has_floor, raise_epoch,
      start_floor;
};

}  // namespace dlock::backends::mysql
