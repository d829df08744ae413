#include "backends/zookeeper/settings.hpp"

#include "dlock/errors.hpp"

namespace dlock::backends::zookeeper {

Settings parse_settings(const core::Url& url) {
  const std::string form = "zookeeper://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PATH][?session_timeout=10s]";
  core::UrlOptions options(url);
  Settings settings;
  settings.session.shown = url.redacted();
  settings.session.session_timeout = options.take_duration("session_timeout").value_or(kDefaultSessionTimeout);
  settings.session.connect_timeout = options.take_duration("connect_timeout").value_or(kDefaultConnectTimeout);
  options.finish();
  if (url.host.empty()) {
    throw ConfigurationError("zookeeper:// needs its servers, as in " + form + "; got " + url.redacted(), "zookeeper");
  }
  if (settings.session.session_timeout.count() <= 0 || settings.session.connect_timeout.count() <= 0) {
    throw ConfigurationError("zookeeper:// session_timeout and connect_timeout must be positive; got " + url.redacted(),
                             "zookeeper");
  }
  settings.session.hosts = url.host;
  if (url.port) settings.session.hosts.append(":").append(std::to_string(*url.port));
  settings.session.user = url.user;
  settings.session.password = url.password;
  if (!url.password.empty() && url.user.empty()) {
    throw ConfigurationError("zookeeper:// digest auth needs a user and a password (USER:PASSWORD@); got " +
                                 url.redacted(),
                             "zookeeper");
  }
  if (!url.path.empty() && url.path != "/") {
    settings.root = url.path;
    while (settings.root.size() > 1 && settings.root.back() == '/') settings.root.pop_back();
    if (settings.root.find("//") != std::string::npos || settings.root.find("/./") != std::string::npos ||
        settings.root.find("/../") != std::string::npos) {
      throw ConfigurationError("zookeeper:// path '" + url.path + "' is not a node path (" + form + ")", "zookeeper");
    }
  }
  return settings;
}

}  // namespace dlock::backends::zookeeper
