#pragma once

// The force-release audit log: one JSON object a line, each written and fsynced before the
// force-release is reported. `dlock serve` and `dlock force-release` append to it.

#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "dlock/types.hpp"

namespace dlock::cli {

// Beside the embedded default database, in the same per-user state directory.
std::string default_audit_log();
// Now, as 2026-11-24T05:06:07.890Z.
std::string utc_now_iso();

// Who asked for a force-release, from where, why, and whether with the lock delay.
struct AuditRequest {
  std::string by;
  std::string from;
  std::string reason;
  bool lock_delay = true;
};
// The entry that records one holder a force-release evicted: at (now), by, from, reason, key,
// owner, mode, token, lock_delay.
nlohmann::json audit_entry(const AuditRequest& request, const LockInfo& evicted);

class AuditLog {
 public:
  // Opens (creating) the file for appending; ConfigurationError when it cannot.
  explicit AuditLog(std::string path);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Appends one entry and fsyncs it; std::system_error when that fails.
  void append(const nlohmann::json& entry);
  // The newest `limit` entries, newest first.
  nlohmann::json newest(std::size_t limit) const;

 private:
  std::string path_;
  int fd_ = -1;
  mutable std::mutex mutex_;
};

}  // namespace dlock::cli
