#pragma once

#include <CLI/CLI.hpp>

#include "cli/cli_common.hpp"

namespace dlock::cli {

// `dlock bench`: the workloads of bench-workloads.md. The subcommand's callback stores its
// process exit code in `exit_code`.
void add_bench_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace dlock::cli
