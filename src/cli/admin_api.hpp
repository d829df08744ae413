#pragma once

// The admin HTTP API of `dlock serve` (docs/http-api.md): routes, access token, the
// cross-site checks, and the audit of every force-release.

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "cli/audit_log.hpp"
#include "dlock/client.hpp"

namespace dlock::cli {

class AdminApi {
 public:
  AdminApi(Client client, AuditLog& audit, std::optional<std::string> token);
  void install(httplib::Server& server);

 private:
  void force_release(const httplib::Request& request, httplib::Response& response);
  std::string metrics();

  Client client_;
  AuditLog& audit_;
  std::optional<std::string> token_;
  std::atomic<std::uint64_t> force_releases_{0};
};

}  // namespace dlock::cli
