// `dlock serve` runs the dlock-serve program (src/cli/serve_main.cpp) with the same arguments:
// the HTTP server links Debian's shared cpp-httplib, which this statically linked tool cannot.

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"

namespace dlock::cli {
namespace {

// dlock-serve beside this executable (a build or an install), else from $PATH.
std::string serve_program() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const auto beside = self.parent_path() / "dlock-serve";
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "dlock-serve";
}

}  // namespace

std::optional<int> forward_serve(int argc, char** argv) {
  // Only the global options may come before `serve`.
  std::vector<std::string> words{"dlock-serve"};
  int i = 1;
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--json") continue;
    if ((arg == "--url" || arg == "--password-file") && i + 1 < argc) {
      words.insert(words.end(), {std::string(arg), argv[++i]});
      continue;
    }
    if (arg.starts_with("--url=") || arg.starts_with("--password-file=")) {
      words.emplace_back(arg);
      continue;
    }
    break;
  }
  if (i >= argc || std::string_view(argv[i]) != "serve") return std::nullopt;
  words.insert(words.end(), argv + i + 1, argv + argc);
  std::vector<char*> exec_argv;
  for (auto& word : words) exec_argv.push_back(word.data());
  exec_argv.push_back(nullptr);
  const std::string program = serve_program();
  ::execvp(program.c_str(), exec_argv.data());
  std::fprintf(stderr,
               "dlock: cannot run %s: %s. `dlock serve` runs the dlock-serve program, which the dlock package and "
               "`cmake --install` put beside dlock; install it there or on $PATH (build target dlock_serve)\n",
               program.c_str(), std::strerror(errno));
  return kExitError;
}

void add_serve_command(CLI::App& app) {
  // Listed for --help only: forward_serve() runs dlock-serve before the command line is parsed,
  // so that all of it, --help included, is dlock-serve's.
  app.add_subcommand("serve", "Serve the admin HTTP API: list, inspect and force-release locks (dlock serve --help)")
      ->allow_extras();
}

}  // namespace dlock::cli
