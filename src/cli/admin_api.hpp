#pragma once

// The admin HTTP API of `dlock serve` (docs/http-api.md): routes, the allowed host names,
// access token, the cross-site checks, and the audit of every force-release.

#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "cli/allowed_hosts.hpp"
#include "cli/audit_log.hpp"
#include "dlock/client.hpp"

namespace dlock::cli {

struct AdminApiOptions {
  AllowedHosts hosts;
  std::optional<std::string> token;
  std::size_t held_locks_limit = 1000;  // /metrics counts held locks no further (--metrics-held-max)
};

class AdminApi {
 public:
  AdminApi(Client client, AuditLog& audit, AdminApiOptions options);
  void install(httplib::Server& server);

 private:
  void force_release(const httplib::Request& request, httplib::Response& response);
  std::string metrics();

  Client client_;
  AuditLog& audit_;
  AdminApiOptions options_;
  std::atomic<std::uint64_t> force_releases_{0};
};

}  // namespace dlock::cli
