#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace dlock::cli {

// `dlock completion bash`, hidden from --help: prints a bash completion script made by walking
// `app` (its subcommands, nested ones too, and their options) when the command runs, so it
// covers every command added before parsing and never drifts from them. The build installs its
// output as share/bash-completion/completions/dlock.
void add_completion_command(CLI::App& app);

// The script for `app`, whose name is the program's.
std::string bash_completion(const CLI::App& app);

}  // namespace dlock::cli
