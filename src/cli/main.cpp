// dlock: distributed locks from the shell, in the manner of flock(1). See docs/cli.md.

#include <malloc.h>

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/bench_command.hpp"
#include "cli/cli_common.hpp"
#include "cli/commands.hpp"
#include "cli/completion_command.hpp"
#include "cli/run_arguments.hpp"

namespace {

// The first argument before any "--" that looks like an option but is none of `command`'s
// (nor the top level's): most likely a key that starts with '-'.
std::string unknown_dash_argument(CLI::App& app, const CLI::App* command, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg.front() != '-') continue;
    const std::string name = arg.substr(0, arg.find('='));
    const bool known = (command != nullptr && command->get_option_no_throw(name) != nullptr) ||
                       app.get_option_no_throw(name) != nullptr || name == "-h" || name == "--help";
    if (!known) return arg;
  }
  return {};
}

// `args` as an argv: pointers into its strings, then a null.
std::vector<char*> c_argv(std::vector<std::string>& args) {
  std::vector<char*> pointers;
  for (auto& arg : args) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  return pointers;
}

int report(int exit_code, const std::string& message) {
  std::fprintf(stderr, "dlock: %s\n", message.c_str());
  return exit_code;
}

int dlock_main(int argc, char** argv) {
  using namespace dlock::cli;
  std::vector<std::string> args = hide_url_passwords(argc, argv);
  if (std::vector<char*> pointers = c_argv(args); const auto failed = forward_serve(argc, pointers.data())) {
    return *failed;
  }

  CLI::App app{"Distributed locks from the shell, in the manner of flock(1).", "dlock"};
  // Subcommands hand options they do not know (--url, --json) to the top level, so the
  // global options work after the subcommand name too.
  app.fallthrough();
  app.require_subcommand(1);
  app.set_version_flag("--version", DLOCK_VERSION);

  GlobalOptions global;
  app.add_option("--url", global.url,
                 "Backend URL, e.g. sqlite:///var/lib/dlock/locks.db (default: $DLOCK_URL, else "
                 "sqlite:// on a per-user file)")
      ->type_name("URL");
  app.add_option("--password-file", global.password_file,
                 "File whose first line is the store's password, kept out of the URL, the command line "
                 "and the environment of `run`'s command (default: $DLOCK_PASSWORD_FILE, else $DLOCK_PASSWORD)")
      ->type_name("FILE");
  app.add_flag("--json", global.json, "Print machine-readable JSON on stdout");

  int exit_code = kExitOk;
  add_run_command(app, global, exit_code);
  add_admin_commands(app, global, exit_code);
  add_serve_command(app);
  add_bench_command(app, global, exit_code);
  add_completion_command(app);
  // Set after the subcommands are added, which would otherwise inherit it.
  app.footer(
      "Exit codes: 0 success (run: the command's status; 128+N if it died by signal N), "
      "1 lock not obtained in time (run/acquire -E changes it) or release of a hold the owner "
      "does not have, 64 usage error, 69 backend or configuration error, 75 lock lost while "
      "the command ran. Environment: DLOCK_URL, the backend URL when --url is not given; "
      "DLOCK_PASSWORD_FILE or DLOCK_PASSWORD, its password. A DURATION is seconds (5, 0.5) or a number "
      "with a unit (500ms, 30s, 5m, 2h). A command's options: dlock COMMAND --help. The manual: man dlock.");

  // Subcommand callbacks run inside parse(), so their exceptions land here too.
  try {
    arrange_run_arguments(app, args);
    std::vector<char*> pointers = c_argv(args);
    app.parse(static_cast<int>(args.size()), pointers.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    std::string usage = "dlock";
    for (const auto* command : app.get_subcommands()) usage += " " + command->get_name();
    if (const auto rest = app.remaining();
        usage == "dlock" && !rest.empty() && !rest.front().starts_with('-')) {
      message = "unknown subcommand '" + rest.front() + "'";  // CLI11 would only say one is required
    }
    const auto commands = app.get_subcommands();
    const CLI::App* command = commands.empty() ? nullptr : commands.front();
    if (const std::string dash = unknown_dash_argument(app, command, argc, argv); !dash.empty() && command) {
      message += fmt::format(" ('{0}' is no option of dlock {1}; a key that starts with '-' goes after '--', as in "
                             "dlock {1} -- {0})",
                             dash, command->get_name());
    }
    return report(kExitUsage, message + " (see " + usage + " --help)");
  } catch (const dlock::InvalidArgument& e) {
    return report(kExitUsage, e.what());
  } catch (const std::exception& e) {
    return report(kExitError, e.what());
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  // One malloc arena: the tool's few threads rarely allocate, and each extra arena maps and
  // unmaps 64 MiB, which shows in a short `dlock run`.
  ::mallopt(M_ARENA_MAX, 1);
  try {
    return dlock_main(argc, argv);
  } catch (...) {  // never a crash, whatever escaped (even from the handlers above)
    std::fputs("dlock: unexpected internal error\n", stderr);
    return dlock::cli::kExitError;
  }
}
