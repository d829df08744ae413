#pragma once

// Backend URLs: scheme://[user[:password]@]host[:port][/path][?name=value&...]. For redis://,
// rediss:// and redlock:// a lone userinfo (redis://SECRET@host) is the password, as in redis-cli.
// Options are strict: a backend reads the ones it knows through UrlOptions and finish()
// rejects the rest, naming the accepted ones.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlock::core {

struct Url {
  std::string scheme;    // lowercase
  std::string user;      // percent-decoded
  std::string password;  // percent-decoded; never printed
  std::string host;      // may be a comma-separated host list (redlock://h1,h2)
  std::optional<std::uint16_t> port;
  std::string path;  // percent-decoded, with its leading '/' ("" when absent)
  std::vector<std::pair<std::string, std::string>> query;  // in order, percent-decoded

  // Throws ConfigurationError naming the problem and the expected form.
  static Url parse(std::string_view text);
  // The URL with the password replaced by "***".
  std::string redacted() const;
};

// Strict option reader over Url::query.
class UrlOptions {
 public:
  explicit UrlOptions(const Url& url);
  std::optional<std::string> take_string(std::string_view name);
  std::optional<std::chrono::milliseconds> take_duration(std::string_view name);
  std::optional<bool> take_bool(std::string_view name);
  std::optional<long long> take_int(std::string_view name, long long min, long long max);
  // Throws ConfigurationError if any option was not taken.
  void finish() const;

 private:
  const Url& url_;
  std::vector<bool> taken_;
  std::vector<std::string> known_;
};

}  // namespace dlock::core
