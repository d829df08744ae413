#pragma once

// What an etcd:// URL says: the cluster's endpoints, the credentials, the prefix under which the
// locks live, the lease's TTL and the connection's timeout.

#include <chrono>
#include <string>
#include <vector>

#include "core/url.hpp"

namespace dlock::backends::etcd {

inline constexpr std::chrono::seconds kDefaultTtl{10};
inline constexpr std::chrono::milliseconds kDefaultConnectTimeout{10'000};

struct Settings {
  std::vector<std::string> endpoints;  // HOST:PORT, in the URL's order
  std::string shown;                   // the URL without its password, for messages
  std::string user, password;          // etcd's Authenticate when user is not empty
  std::string root = "/dlock";         // every key of dlock's starts with root + "/"
  std::chrono::seconds ttl = kDefaultTtl;
  // How long opening a client waits for the cluster, and each request for its answer.
  std::chrono::milliseconds connect_timeout = kDefaultConnectTimeout;
};

// etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PREFIX][?ttl=10s&connect_timeout=10s].
// Throws ConfigurationError naming the problem; never shows the password.
Settings parse_settings(const core::Url& url);

}  // namespace dlock::backends::etcd
