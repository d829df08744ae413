#include "core/url.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "core/percent.hpp"
#include "dlock/client.hpp"
#include "dlock/errors.hpp"

namespace dlock::core {
namespace {

[[noreturn]] void bad_url(std::string_view shown, const std::string& why) {
  throw ConfigurationError("invalid URL '" + std::string(shown) + "': " + why +
                           " (expected scheme://[user[:password]@]host[:port][/path][?option=value], "
                           "e.g. sqlite:///var/tmp/locks.db or local://)");
}

// `in` percent-decoded, or the URL refused.
std::string decoded(std::string_view in, std::string_view shown) {
  auto out = percent_decode(in);
  if (!out) bad_url(shown, "a '%' must be followed by two hex digits");
  return std::move(*out);
}

bool is_redis_scheme(std::string_view scheme) {
  return scheme == "redis" || scheme == "rediss" || scheme == "redlock";
}

}  // namespace

Url Url::parse(std::string_view text) {
  Url url;
  const std::size_t sep = text.find("://");
  // Until the password is known, errors show the text only up to the authority.
  const std::string_view shown = sep == std::string_view::npos ? text : text.substr(0, sep + 3);
  if (sep == std::string_view::npos || sep == 0) bad_url(shown, "it has no scheme:// prefix");
  url.scheme.assign(text.substr(0, sep));
  for (char& c : url.scheme) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      bad_url(shown, "the scheme has invalid characters");
    }
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::string_view rest = text.substr(sep + 3);
  std::string_view query;
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  std::string_view authority = rest;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    url.path = decoded(rest.substr(slash), shown);
  }
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const auto colon = userinfo.find(':');
    if (colon == std::string_view::npos && is_redis_scheme(url.scheme)) {
      // Redis's convention (redis-cli -u, Jedis, redis-py): a lone userinfo is the password.
      url.password = decoded(userinfo, shown);
    } else {
      url.user = decoded(userinfo.substr(0, colon), shown);
      if (colon != std::string_view::npos) url.password = decoded(userinfo.substr(colon + 1), shown);
    }
  }
  // A host list (redlock://h1:1,h2:2) keeps its ports inside `host`; backends split it.
  const bool host_list = authority.find(',') != std::string_view::npos;
  std::string_view port;
  if (!host_list) {
    if (!authority.empty() && authority.front() == '[') {
      const auto close = authority.find(']');
      if (close == std::string_view::npos) bad_url(shown, "an IPv6 address lacks its ']'");
      if (close + 1 < authority.size()) {
        if (authority[close + 1] != ':') bad_url(shown, "junk after the IPv6 address");
        port = authority.substr(close + 2);
      }
      authority = authority.substr(0, close + 1);
    } else if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      authority = authority.substr(0, colon);
    }
  }
  url.host = decoded(authority, shown);
  if (!port.empty()) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
      bad_url(shown, "the port must be a number from 1 to 65535");
    }
    url.port = static_cast<std::uint16_t>(value);
  }
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) bad_url(shown, "options must be name=value");
    std::string name = decoded(item.substr(0, eq), shown);
    if (std::any_of(url.query.begin(), url.query.end(), [&](const auto& kv) { return kv.first == name; })) {
      bad_url(shown, "option '" + name + "' is given twice");
    }
    url.query.emplace_back(std::move(name), decoded(item.substr(eq + 1), shown));
  }
  return url;
}

std::string Url::redacted() const {
  std::string out = scheme + "://";
  if (!user.empty() || !password.empty()) {
    out += user;
    if (!password.empty()) out += ":***";
    out += '@';
  }
  out += host;
  if (port) out += ':' + std::to_string(*port);
  out += path;
  for (std::size_t i = 0; i < query.size(); ++i) {
    out += (i == 0 ? '?' : '&') + query[i].first + '=' + query[i].second;
  }
  return out;
}

UrlOptions::UrlOptions(const Url& url) : url_(url), taken_(url.query.size(), false) {}

std::optional<std::string> UrlOptions::take_string(std::string_view name) {
  known_.emplace_back(name);
  for (std::size_t i = 0; i < url_.query.size(); ++i) {
    if (url_.query[i].first == name) {
      taken_[i] = true;
      return url_.query[i].second;
    }
  }
  return std::nullopt;
}

std::optional<std::chrono::milliseconds> UrlOptions::take_duration(std::string_view name) {
  const auto value = take_string(name);
  if (!value) return std::nullopt;
  try {
    return parse_duration(*value);
  } catch (const InvalidArgument& e) {
    throw ConfigurationError("URL option " + std::string(name) + ": " + e.what(), url_.scheme);
  }
}

std::optional<bool> UrlOptions::take_bool(std::string_view name) {
  const auto value = take_string(name);
  if (!value) return std::nullopt;
  if (*value == "true" || *value == "1" || *value == "on") return true;
  if (*value == "false" || *value == "0" || *value == "off") return false;
  throw ConfigurationError("URL option " + std::string(name) + "='" + *value + "' must be true or false",
                           url_.scheme);
}

std::optional<long long> UrlOptions::take_int(std::string_view name, long long min, long long max) {
  const auto value = take_string(name);
  if (!value) return std::nullopt;
  long long n = 0;
  const auto [end, ec] = std::from_chars(value->data(), value->data() + value->size(), n);
  if (ec != std::errc() || end != value->data() + value->size() || n < min || n > max) {
    throw ConfigurationError("URL option " + std::string(name) + "='" + *value +
                                 "' must be a whole number from " + std::to_string(min) + " to " +
                                 std::to_string(max),
                             url_.scheme);
  }
  return n;
}

void UrlOptions::finish() const {
  for (std::size_t i = 0; i < taken_.size(); ++i) {
    if (taken_[i]) continue;
    std::string accepted;
    for (const auto& k : known_) accepted += (accepted.empty() ? "" : ", ") + k;
    throw ConfigurationError("unknown option '" + url_.query[i].first + "' in " + url_.scheme +
                                 ":// URL (accepted: " + (accepted.empty() ? "none" : accepted) + ")",
                             url_.scheme);
  }
}

}  // namespace dlock::core
