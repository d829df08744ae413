#pragma once

// Where `dlock run`'s options end and its command begins, before CLI11 parses the line.
//
// As in flock(1), the command starts at the first word after KEY (`dlock run job ls -l`), with
// these exceptions: when a "--" follows KEY, the words up to it are dlock's options and more
// keys (`dlock run job -n -- true` is `dlock run -n job -- true`, and `dlock run a b -- true`
// is `dlock run --key b a -- true`), and flock's `dlock run KEY -c 'STRING'` is
// `dlock run -c 'STRING' KEY`. Without a "--", a word after KEY that starts with '-' and is
// neither is refused with InvalidArgument saying so and giving both fixes, rather than run as
// the command.

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace dlock::cli {

// Rewrites `args` (argv, program name first) so that every option of `dlock run` stands before
// its KEY; leaves any other command line as it is. `app` is the top level, with `run` added.
void arrange_run_arguments(const CLI::App& app, std::vector<std::string>& args);

}  // namespace dlock::cli
