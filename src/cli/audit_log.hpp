#pragma once

// The force-release audit log: one JSON object a line, each written and fsynced before the
// force-release is reported. `dlock serve` and `dlock force-release` append to it.

#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace dlock::cli {

// Beside the embedded default database, in the same per-user state directory.
std::string default_audit_log();
// Now, as 2026-11-24T05:06:07.890Z.
std::string utc_now_iso();

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
