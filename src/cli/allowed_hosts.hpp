#pragma once

// The names `dlock serve` answers to (docs/http-api.md#security). A browser sends the name it
// resolved in Host, so a page whose own name was made to resolve to this server (DNS
// rebinding) gives itself away there; and a browser names the page that sent a request in
// Origin.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::cli {

class AllowedHosts {
 public:
  // The names of the listening address, with its port: for loopback localhost, 127.0.0.1 and
  // [::1]; for a wildcard address (0.0.0.0, ::) localhost and any IP address; else the
  // address itself. Plus `extra`, each NAME[:PORT] (any port without one), from --allow-host;
  // InvalidArgument names a malformed one.
  AllowedHosts(const std::string& listen_host, int port, const std::vector<std::string>& extra);

  // A Host header: NAME[:PORT], port 80 when none is given.
  bool allows_host(std::string_view host) const;
  // An Origin header: http://NAME[:PORT] or https://NAME[:PORT].
  bool allows_origin(std::string_view origin) const;

 private:
  struct Name {
    std::string name;         // lower case; an IPv6 address in brackets
    std::optional<int> port;  // none: any port
  };
  bool allows(std::string_view name_and_port, int default_port) const;

  std::vector<Name> names_;
  bool any_ip_ = false;  // any IP address with port_ (wildcard listening address)
  int port_ = 0;
};

}  // namespace dlock::cli
