#include "cli/cli_common.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string_view>

#include "cli/commands.hpp"
#include "core/url.hpp"

namespace dlock::cli {

namespace {

template <class Target>
CLI::Option* add_parsed_duration(CLI::App& command, const std::string& name, Target& target,
                                 const std::string& description) {
  return command
      .add_option_function<std::string>(
          name,
          [&target, shown = name.substr(name.rfind(',') + 1)](const std::string& text) {
            try {
              target = parse_duration(text);
            } catch (const Error& e) {
              throw CLI::ValidationError(shown, e.what());
            }
          },
          description)
      ->type_name("DURATION");
}

// The first line of a secret file, without its line end (spaces are kept: they may be part of it).
std::string read_secret_file(const std::string& path, const std::string& what) {
  std::ifstream file(path);
  if (!file) throw ConfigurationError(fmt::format("{} '{}' cannot be read", what, path));
  std::string line;
  std::getline(file, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty()) throw ConfigurationError(fmt::format("{} '{}' is empty: put the password on its first line", what, path));
  return line;
}

std::optional<std::string> given_password(const GlobalOptions& global) {
  if (!global.password_file.empty()) return read_secret_file(global.password_file, "--password-file");
  if (const char* file = std::getenv("DLOCK_PASSWORD_FILE"); file && *file) {  // NOLINT(concurrency-mt-unsafe)
    return read_secret_file(file, "DLOCK_PASSWORD_FILE");
  }
  if (const char* password = std::getenv("DLOCK_PASSWORD"); password && *password) {  // NOLINT(concurrency-mt-unsafe)
    return std::string(password);
  }
  return std::nullopt;
}

std::string percent_encode(std::string_view text) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += ch;
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// "O (exclusive, token 7, 1 hold, 12.3s left)"
std::string describe_holder(const LockInfo& holder) {
  if (holder.evicted) {
    return fmt::format(
        "{} ({}, token {}), force-released: closed until that holder releases it or its lease ends in {}",
        holder.owner, to_string(holder.mode), holder.token, format_duration(holder.ttl_left));
  }
  return fmt::format("{} ({}, token {}, {} hold{}, {} left)", holder.owner, to_string(holder.mode),
                     holder.token, holder.hold_count, holder.hold_count == 1 ? "" : "s",
                     format_duration(holder.ttl_left));
}

}  // namespace

std::optional<Userinfo> find_userinfo(std::string_view url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::nullopt;
  const std::size_t begin = scheme_end + 3;
  const std::string_view authority = url.substr(begin, url.find_first_of("/?", begin) - begin);
  return Userinfo{begin, authority.rfind('@') == std::string_view::npos ? std::string::npos : begin + authority.rfind('@')};
}

bool password_given(const GlobalOptions& global) {
  const auto set = [](const char* name) {
    const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): nothing calls setenv
    return value != nullptr && *value != '\0';
  };
  return !global.password_file.empty() || set("DLOCK_PASSWORD_FILE") || set("DLOCK_PASSWORD");
}

std::string url_with_password(const std::string& url, const std::string& password) {
  const auto userinfo = find_userinfo(url);
  if (!userinfo) throw ConfigurationError("a password was given, but the URL names no server: " + core::Url::parse(url).redacted());
  if (userinfo->at == std::string::npos) {
    return url.substr(0, userinfo->begin) + ":" + percent_encode(password) + "@" + url.substr(userinfo->begin);
  }
  const std::string_view info = std::string_view(url).substr(userinfo->begin, userinfo->at - userinfo->begin);
  if (info.find(':') != std::string_view::npos) {
    throw ConfigurationError("the URL has a password and a password was also given (--password-file, "
                             "DLOCK_PASSWORD_FILE or DLOCK_PASSWORD): give it once, preferably not in the URL");
  }
  return url.substr(0, userinfo->at) + ":" + percent_encode(password) + url.substr(userinfo->at);
}

Client open_client(const GlobalOptions& global, const ClientOptions& options) {
  std::string url = global.url;
  if (url.empty()) {
    const char* env = std::getenv("DLOCK_URL");  // NOLINT(concurrency-mt-unsafe): nothing calls setenv
    url = env && *env ? env : Client::embedded_default_url();
  }
  // A store on this host (sqlite:///path) has no password: one from the environment, meant for
  // a server, is not for it; one given with --password-file is refused by the store, by name.
  const auto userinfo = find_userinfo(url);
  const bool names_a_server = userinfo && url.find_first_of("/?", userinfo->begin) != userinfo->begin;
  if (!names_a_server && global.password_file.empty()) return Client::open(url, options);
  const auto password = given_password(global);
  return Client::open(password ? url_with_password(url, *password) : url, options);
}

std::vector<std::string> hide_url_passwords(int argc, char** argv) {
  std::vector<std::string> original(argv, argv + argc);
  for (int i = 1; i < argc; ++i) {
    char* value = nullptr;
    if (std::string_view(argv[i]) == "--url" && i + 1 < argc) {
      value = argv[i + 1];
    } else if (std::string_view(argv[i]).starts_with("--url=")) {
      value = argv[i] + 6;
    }
    if (value == nullptr) continue;
    const std::string_view url = value;
    const auto userinfo = find_userinfo(url);
    if (!userinfo || userinfo->at == std::string::npos) continue;
    const auto colon = url.substr(userinfo->begin, userinfo->at - userinfo->begin).find(':');
    // A lone userinfo may be a password (redis://SECRET@host): hide it too.
    const std::size_t from = colon == std::string_view::npos ? userinfo->begin : userinfo->begin + colon + 1;
    std::fill(value + from, value + userinfo->at, 'x');
  }
  return original;
}

nlohmann::json lock_json(const LockInfo& info) {
  return {{"key", info.key},
          {"owner", info.owner},
          {"mode", to_string(info.mode)},
          {"token", info.token},
          {"hold_count", info.hold_count},
          {"ttl_left_ms", info.ttl_left.count()},
          {"held_for_ms", info.held_for ? nlohmann::json(info.held_for->count()) : nlohmann::json(nullptr)},
          {"waiters", info.waiters ? nlohmann::json(*info.waiters) : nlohmann::json(nullptr)},
          {"queue", info.queue ? nlohmann::json(*info.queue) : nlohmann::json(nullptr)},
          {"evicted", info.evicted}};
}

nlohmann::json holders_json(const std::vector<LockInfo>& holders) {
  nlohmann::json array = nlohmann::json::array();
  for (const LockInfo& holder : holders) array.push_back(lock_json(holder));
  return array;
}

nlohmann::json key_json(std::string_view key, const std::vector<LockInfo>& holders) {
  return {{"key", key}, {"held", !holders.empty()}, {"holders", holders_json(holders)}};
}

std::size_t count_keys(const std::vector<LockInfo>& holders) {
  std::size_t keys = 0;
  for (std::size_t i = 0; i < holders.size(); ++i) {
    if (i == 0 || holders[i].key != holders[i - 1].key) ++keys;
  }
  return keys;
}

CLI::Option* add_duration_option(CLI::App& command, const std::string& name,
                                 std::chrono::milliseconds& target, const std::string& description) {
  return add_parsed_duration(command, name, target, description);
}

CLI::Option* add_duration_option(CLI::App& command, const std::string& name,
                                 std::optional<std::chrono::milliseconds>& target,
                                 const std::string& description) {
  return add_parsed_duration(command, name, target, description);
}

void add_wait_options(CLI::App& command, WaitOptions& options) {
  auto* wait = add_duration_option(command, "-w,--wait", options.wait,
                                   "Give up after waiting this long for a busy key (default: wait forever)");
  command.add_flag("-n,--no-wait", options.no_wait, "Make one attempt; give up at once if the key is busy")
      ->excludes(wait);
}

void add_quiet_flag(CLI::App& command, bool& quiet) {
  command.add_flag("-q,--quiet", quiet,
                   "Say nothing when the lock is not obtained in time, as flock(1) does (cron mails no "
                   "'busy'); errors are still reported");
}

Attempt take_lock(const Client& client, std::string_view key, const WaitOptions& wait,
                  const LockOptions& options) {
  if (wait.no_wait) return client.try_acquire(key, options);
  if (wait.wait) return client.try_acquire_for(key, *wait.wait, options);
  return Attempt(client.acquire(key, options));
}

std::string conflict_message(std::string_view key, const WaitOptions& wait, const std::vector<LockInfo>& holders) {
  std::string message = wait.no_wait
                            ? fmt::format("'{}' is busy", key)
                            : fmt::format("gave up on '{}' after waiting {}", key,
                                          format_duration(wait.wait.value_or(std::chrono::milliseconds(0))));
  message += holders.empty() ? std::string(": it is changing hands (no holder to name yet)")
                            : ": " + describe_holders(holders);
  return message;
}

std::string describe_holders(const std::vector<LockInfo>& holders) {
  std::vector<std::string> each;
  for (const LockInfo& holder : holders) each.push_back(describe_holder(holder));
  std::string text = fmt::format("held by {}", fmt::join(each, " and by "));
  // The queue is the key's: every holder carries the same.
  const LockInfo& any = holders.front();
  if (any.queue && !any.queue->empty()) {
    text += fmt::format("; waiting: {}", fmt::join(*any.queue, ", "));
    if (any.waiters && *any.waiters > any.queue->size()) {
      text += fmt::format(" and {} more", *any.waiters - any.queue->size());
    }
  }
  return text;
}

std::string format_duration(std::chrono::milliseconds duration) {
  const long long ms = duration.count();
  if (ms < 1'000) return fmt::format("{}ms", ms);
  if (ms < 60'000) {
    // Truncated, not rounded: a lease with 29981 ms left does not have 30 s left.
    return ms % 1000 == 0 ? fmt::format("{}s", ms / 1000) : fmt::format("{}.{}s", ms / 1000, ms % 1000 / 100);
  }
  const long long s = ms / 1000;
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
}

}  // namespace dlock::cli
