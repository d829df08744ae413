#pragma once

// What a redlock:// URL says: its servers, each a redis:// endpoint, and the options.

#include <chrono>
#include <string>
#include <vector>

#include "backends/redis/connection.hpp"
#include "backends/redis/keys.hpp"
#include "core/url.hpp"

namespace dlock::backends::redlock {

// Redlock wants per-server timeouts well below the lease: a server that does not answer in
// time only costs its vote.
inline constexpr std::chrono::milliseconds kConnectTimeout{250};
inline constexpr std::chrono::milliseconds kCommandTimeout{500};

struct Settings {
  std::vector<redis::Endpoint> servers;
  std::string ns = redis::kDefaultNamespace;
  std::chrono::milliseconds command_timeout = kCommandTimeout;
};

// redlock://[user:password@]host1:port,host2:port,host3:port[/db][?connect_timeout=…&
// command_timeout=…&namespace=…]: at least three distinct servers, sharing the credentials and
// the database. Throws ConfigurationError naming the problem.
Settings parse_settings(const core::Url& url);

}  // namespace dlock::backends::redlock
