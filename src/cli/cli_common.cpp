#include "cli/cli_common.hpp"

#include <fmt/format.h>

#include "cli/commands.hpp"

namespace dlock::cli {

Client open_client(const GlobalOptions& global) { return Client::open(global.url); }

nlohmann::json lock_json(const LockInfo& info) {
  return {{"key", info.key},
          {"owner", info.owner},
          {"token", info.token},
          {"hold_count", info.hold_count},
          {"ttl_left_ms", info.ttl_left.count()},
          {"held_for_ms", info.held_for ? nlohmann::json(info.held_for->count()) : nlohmann::json(nullptr)},
          {"waiters", info.waiters ? nlohmann::json(*info.waiters) : nlohmann::json(nullptr)},
          {"evicted", info.evicted}};
}

void add_wait_options(CLI::App& command, WaitOptions& options) {
  auto* wait = add_duration_option(command, "-w,--wait", options.wait,
                                   "Give up after waiting this long for a busy key (default: wait forever)");
  command.add_flag("-n,--no-wait", options.no_wait, "Make one attempt; give up at once if the key is busy")
      ->excludes(wait);
}

Attempt take_lock(const Client& client, std::string_view key, const WaitOptions& wait,
                  const LockOptions& options) {
  if (wait.no_wait) return client.try_acquire(key, options);
  if (wait.wait) return client.try_acquire_for(key, *wait.wait, options);
  return Attempt(client.acquire(key, options));
}

std::string conflict_message(std::string_view key, const WaitOptions& wait, const Attempt& attempt) {
  std::string message = wait.no_wait
                            ? fmt::format("'{}' is busy", key)
                            : fmt::format("gave up on '{}' after waiting {}", key,
                                          format_duration(wait.wait.value_or(std::chrono::milliseconds(0))));
  if (attempt.holder()) message += ": " + describe_holder(*attempt.holder());
  return message;
}

std::string describe_holder(const LockInfo& holder) {
  return fmt::format("held by {} (token {}, {} hold{}, {} left)", holder.owner, holder.token,
                     holder.hold_count, holder.hold_count == 1 ? "" : "s", format_duration(holder.ttl_left));
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
