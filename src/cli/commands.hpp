#pragma once

// The dlock subcommands other than bench, and the pieces they share (cli_common.cpp).

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "cli/cli_common.hpp"

// CLI11 only declared: including it costs each source seconds of compile time.
namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace dlock::cli {

// `dlock run`. The subcommand's callback stores its process exit code in `exit_code`.
void add_run_command(CLI::App& app, const GlobalOptions& global, int& exit_code);
// `dlock acquire`, `release`, `status`, `list`, `force-release`.
void add_admin_commands(CLI::App& app, const GlobalOptions& global, int& exit_code);
// `dlock serve`: the admin HTTP API (docs/http-api.md), served by the dlock-serve program.
// forward_serve() runs it in place of this process when the command line is `dlock [--url U]
// serve ...`, and returns an exit code only if it could not; otherwise nothing.
std::optional<int> forward_serve(int argc, char** argv);
void add_serve_command(CLI::App& app);

// How long `run` and `acquire` wait for a busy key.
struct WaitOptions {
  std::optional<std::chrono::milliseconds> wait;  // --wait D; unset: forever
  bool no_wait = false;                           // --no-wait: one attempt
};
void add_wait_options(CLI::App& command, WaitOptions& options);
// -q/--quiet: no message when the lock is not obtained in time (errors are still reported).
void add_quiet_flag(CLI::App& command, bool& quiet);

// Adds an option taking "500ms", "30s", "5m"...; a malformed value is a usage error naming
// the option (its last name).
CLI::Option* add_duration_option(CLI::App& command, const std::string& name,
                                 std::chrono::milliseconds& target, const std::string& description);
CLI::Option* add_duration_option(CLI::App& command, const std::string& name,
                                 std::optional<std::chrono::milliseconds>& target,
                                 const std::string& description);

// Takes `key` as `wait` says: one attempt, a bounded wait, or forever.
Attempt take_lock(const Client& client, std::string_view key, const WaitOptions& wait,
                  const LockOptions& options);
// Why an attempt failed, for stderr: "'k' is busy: held by O (exclusive, token 7, 1 hold, 12.3s left)".
std::string conflict_message(std::string_view key, const WaitOptions& wait, const std::vector<LockInfo>& holders);
// A key's holders, at least one: "held by O (exclusive, token 7, 1 hold, 12.3s left)", each
// holder so, joined by " and by ", then the waiting owners where the store names them.
std::string describe_holders(const std::vector<LockInfo>& holders);
// "850ms", "10s", "12.3s", "4m05s", "2h03m".
std::string format_duration(std::chrono::milliseconds duration);

}  // namespace dlock::cli
