#include "cli/allowed_hosts.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include "dlock/errors.hpp"

namespace dlock::cli {
namespace {

struct HostPort {
  std::string name;
  std::optional<int> port;
};

bool is_ipv4(const std::string& name) {
  in_addr address{};
  return ::inet_pton(AF_INET, name.c_str(), &address) == 1;
}

// "[v6]" with a valid IPv6 address inside.
bool is_bracketed_ipv6(const std::string& name) {
  in6_addr address{};
  return name.size() > 2 && name.front() == '[' && name.back() == ']' &&
         ::inet_pton(AF_INET6, name.substr(1, name.size() - 2).c_str(), &address) == 1;
}

bool is_dns_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

// NAME[:PORT] with NAME a DNS name, an IPv4 address or [IPv6], PORT 1 to 65535.
std::optional<HostPort> parse_host_port(std::string_view text) {
  std::string_view name = text;
  std::optional<std::string_view> port;
  const auto colon = text.starts_with('[') ? text.find(':', text.find(']')) : text.find(':');
  if (colon != std::string_view::npos) {
    name = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  HostPort parsed{std::string(name), std::nullopt};
  std::transform(parsed.name.begin(), parsed.name.end(), parsed.name.begin(),
                 [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
  if (!is_dns_name(parsed.name) && !is_bracketed_ipv6(parsed.name)) return std::nullopt;
  if (port) {
    if (port->empty() || port->size() > 5 ||
        !std::all_of(port->begin(), port->end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    const int value = std::stoi(std::string(*port));
    if (value < 1 || value > 65535) return std::nullopt;
    parsed.port = value;
  }
  return parsed;
}

}  // namespace

AllowedHosts::AllowedHosts(const std::string& listen_host, int port, const std::vector<std::string>& extra)
    : port_(port) {
  if (listen_host.empty() || listen_host == "0.0.0.0" || listen_host == "::") {
    any_ip_ = true;
    names_.push_back({"localhost", port});
  } else if (listen_host == "localhost" || listen_host == "::1" || listen_host.starts_with("127.")) {
    for (const char* name : {"localhost", "127.0.0.1", "[::1]"}) names_.push_back({name, port});
  }
  const std::string own = listen_host.find(':') == std::string::npos ? listen_host : "[" + listen_host + "]";
  if (!any_ip_) names_.push_back({own, port});
  for (const std::string& text : extra) {
    auto parsed = parse_host_port(text);
    if (!parsed) {
      throw InvalidArgument("--allow-host '" + text +
                            "' must be NAME or NAME:PORT, e.g. locks.example.com or [2001:db8::1]:8443");
    }
    names_.push_back({std::move(parsed->name), parsed->port});
  }
}

bool AllowedHosts::allows(std::string_view name_and_port, int default_port) const {
  const auto parsed = parse_host_port(name_and_port);
  if (!parsed) return false;
  const int port = parsed->port.value_or(default_port);
  if (any_ip_ && port == port_ && (is_ipv4(parsed->name) || is_bracketed_ipv6(parsed->name))) return true;
  return std::any_of(names_.begin(), names_.end(), [&](const Name& allowed) {
    return allowed.name == parsed->name && (!allowed.port || *allowed.port == port);
  });
}

bool AllowedHosts::allows_host(std::string_view host) const { return allows(host, 80); }

bool AllowedHosts::allows_origin(std::string_view origin) const {
  if (origin.starts_with("http://")) return allows(origin.substr(7), 80);
  if (origin.starts_with("https://")) return allows(origin.substr(8), 443);
  return false;
}

}  // namespace dlock::cli
