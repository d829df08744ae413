#include "cli/audit_log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "dlock/client.hpp"

namespace dlock::cli {

using nlohmann::json;

std::string default_audit_log() {
  constexpr std::string_view scheme = "sqlite://";
  return (std::filesystem::path(Client::embedded_default_url().substr(scheme.size())).parent_path() / "audit.log")
      .string();
}

std::string utc_now_iso() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", text, ms);
}

json audit_entry(const AuditRequest& request, const LockInfo& evicted) {
  return {{"at", utc_now_iso()},
          {"by", request.by},
          {"from", request.from},
          {"reason", request.reason},
          {"key", evicted.key},
          {"owner", evicted.owner},
          {"mode", to_string(evicted.mode)},
          {"token", evicted.token},
          {"lock_delay", request.lock_delay}};
}

AuditLog::AuditLog(std::string path) : path_(std::move(path)) {
  std::error_code ignored;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ignored);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    throw ConfigurationError("cannot open the audit log '" + path_ + "': " + std::strerror(errno) +
                                 " (choose another with --audit-log)",
                             "serve");
  }
}

AuditLog::~AuditLog() { ::close(fd_); }

void AuditLog::append(const json& entry) {
  const std::string line = entry.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  std::lock_guard lock(mutex_);
  if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()) || ::fsync(fd_) != 0) {
    throw std::system_error(errno, std::generic_category(), "could not write the audit log '" + path_ + "'");
  }
}

json AuditLog::newest(std::size_t limit) const {
  std::deque<std::string> lines;
  {
    std::lock_guard lock(mutex_);
    std::ifstream file(path_);
    for (std::string line; std::getline(file, line);) {
      if (line.empty()) continue;
      lines.push_back(std::move(line));
      if (lines.size() > limit) lines.pop_front();
    }
  }
  json entries = json::array();
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) entries.push_back(json::parse(*it, nullptr, false));
  return entries;
}

}  // namespace dlock::cli
