#pragma once

// What a zookeeper:// URL says: the ensemble, the credentials, the root path and the timeouts.

#include <chrono>
#include <string>

#include "backends/zookeeper/session.hpp"
#include "core/url.hpp"

namespace dlock::backends::zookeeper {

inline constexpr std::chrono::milliseconds kDefaultSessionTimeout{10'000};
inline constexpr std::chrono::milliseconds kDefaultConnectTimeout{10'000};

struct Settings {
  SessionSettings session;
  std::string root = "/dlock";
};

// zookeeper://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PATH][?session_timeout=…&connect_timeout=…].
// Throws ConfigurationError naming the problem; never shows the password.
Settings parse_settings(const core::Url& url);

}  // namespace dlock::backends::zookeeper
