#include "backends/etcd/settings.hpp"

#include "backends/etcd/errors.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::etcd {
namespace {

const char* const kForm = "etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PREFIX][?ttl=10s]";

[[noreturn]] void refuse(const std::string& why, const core::Url& url) {
  throw ConfigurationError("etcd:// " + why + " (" + kForm + "); got " + url.redacted(), kName);
}

}  // namespace

Settings parse_settings(const core::Url& url) {
  core::UrlOptions options(url);
  Settings settings;
  settings.shown = url.redacted();
  const auto ttl = options.take_duration("ttl").value_or(kDefaultTtl);
  settings.connect_timeout = options.take_duration("connect_timeout").value_or(kDefaultConnectTimeout);
  options.finish();
  // etcd grants leases in whole seconds.
  if (ttl.count() <= 0 || ttl.count() % 1000 != 0)
    refuse("ttl must be a whole number of seconds, such as 10s", url);
  settings.ttl = std::chrono::duration_cast<std::chrono::seconds>(ttl);
  if (settings.connect_timeout.count() <= 0) refuse("connect_timeout must be positive", url);
  if (url.host.empty()) refuse("needs its servers", url);
  std::string hosts = url.host;
  if (url.port) hosts.append(":").append(std::to_string(*url.port));
  for (std::size_t at = 0; at <= hosts.size();) {
    const auto comma = std::min(hosts.find(',', at), hosts.size());
    const std::string endpoint = hosts.substr(at, comma - at);
    const auto colon = endpoint.rfind(':');
    if (endpoint.empty() || colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) {
      refuse("servers are HOST:PORT, each with its port; '" + endpoint + "' is not", url);
    }
    settings.endpoints.push_back(endpoint);
    at = comma + 1;
  }
  settings.user = url.user;
  settings.password = url.password;
  if (!url.password.empty() && url.user.empty())
    refuse("authentication needs a user and a password (USER:PASSWORD@)", url);
  if (!url.path.empty() && url.path != "/") {
    settings.root = url.path;
    while (settings.root.size() > 1 && settings.root.back() == '/') settings.root.pop_back();
    if (settings.root.find("//") != std::string::npos)
      refuse("prefix '" + url.path + "' has an empty part", url);
  }
  return settings;
}

}  // namespace dlock::backends::etcd
