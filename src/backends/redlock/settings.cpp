#include "backends/redlock/settings.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string_view>
#include <utility>

#include "backends/redlock/common.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::redlock {
namespace {

constexpr std::size_t kMinServers = 3;

// "host:port" or "[v6]:port" (port 6379 when absent).
std::pair<std::string, std::uint16_t> split_server(std::string_view item, const std::string& shown) {
  std::string_view host = item, port;
  if (item.substr(0, 1) == "[") {
    const auto close = item.find(']');
    if (close != std::string_view::npos) {
      host = item.substr(1, close - 1);
      if (item.size() > close + 1 && item[close + 1] == ':') port = item.substr(close + 2);
    }
  } else if (const auto colon = item.rfind(':'); colon != std::string_view::npos) {
    host = item.substr(0, colon);
    port = item.substr(colon + 1);
  }
  unsigned value = 6379;
  if (!port.empty()) {
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
      throw ConfigurationError("redlock:// server '" + std::string(item) + "' needs a port from 1 to 65535; got " + shown,
                               kName);
    }
  }
  if (host.empty()) throw ConfigurationError("redlock:// has an empty server in its list; got " + shown, kName);
  return {std::string(host), static_cast<std::uint16_t>(value)};
}

}  // namespace

Settings parse_settings(const core::Url& url) {
  const std::string shown = url.redacted();
  const std::string form = "redlock://[user:password@]host1:port,host2:port,host3:port[/db]";
  core::UrlOptions options(url);
  const auto connect_timeout = options.take_duration("connect_timeout").value_or(kConnectTimeout);
  Settings settings;
  settings.command_timeout = options.take_duration("command_timeout").value_or(kCommandTimeout);
  settings.ns = redis::take_namespace(options, kName);
  options.finish();
  std::vector<std::pair<std::string, std::uint16_t>> hosts;
  std::string_view list = url.host;
  if (url.port) {
    throw ConfigurationError("redlock:// takes its servers as a list, " + form + "; got " + shown, kName);
  }
  for (std::size_t at = 0; at <= list.size();) {
    const auto comma = std::min(list.find(',', at), list.size());
    auto server = split_server(list.substr(at, comma - at), shown);
    if (std::find(hosts.begin(), hosts.end(), server) != hosts.end()) {
      throw ConfigurationError("redlock:// lists " + server.first + ":" + std::to_string(server.second) +
                                   " twice: Redlock needs independent servers; got " + shown,
                               kName);
    }
    hosts.push_back(std::move(server));
    at = comma + 1;
  }
  if (hosts.size() < kMinServers) {
    throw ConfigurationError("redlock:// needs at least " + std::to_string(kMinServers) +
                                 " independent servers, of which a majority must agree (" + form +
                                 "; for one server use redis://); got " + shown,
                             kName);
  }
  for (const auto& [host, port] : hosts) {
    core::Url one = url;
    one.scheme = "redis";
    one.host = host;
    one.port = port;
    one.query.clear();
    core::UrlOptions none(one);
    redis::Endpoint endpoint = redis::parse_endpoint(one, none);
    endpoint.connect_timeout = connect_timeout;
    endpoint.command_timeout = settings.command_timeout;
    settings.servers.push_back(std::move(endpoint));
  }
  if (connect_timeout.count() <= 0 || settings.command_timeout.count() <= 0) {
    throw ConfigurationError("redlock:// connect_timeout and command_timeout must be positive; got " + shown, kName);
  }
  return settings;
}

}  // namespace dlock::backends::redlock
