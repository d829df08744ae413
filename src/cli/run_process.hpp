#pragma once

// `dlock run`'s command: finding the program, starting it with its sentinel, and reaping it.
//
// The command is the leader of its own process group, so its whole tree can be signalled. It
// has PR_SET_PDEATHSIG=SIGKILL; the sentinel's parent-death signal makes it SIGKILL the
// command's group, so nothing the command started keeps running unprotected when dlock dies,
// even by SIGKILL.

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <optional>
#include <string>
#include <vector>

#include "cli/run_signals.hpp"
#include "dlock/client.hpp"

extern char** environ;

namespace dlock::cli {

// Finds the program as execvp(3) would, before the clone, so the child only calls execve.
// Returns an empty path and sets `error` (ENOENT or EACCES) when there is none.
std::string resolve_program(const std::string& name, int& error);

inline constexpr const char* kShell = "/bin/sh";

// Everything the child needs, built before the clone: until its exec the child shares this
// multithreaded process's memory and may only make async-signal-safe calls; it must not
// allocate.
struct ExecPlan {
  std::string path;
  std::vector<char*> argv;
  std::vector<char*> shell_argv;  // for a script without #!, as execvp(3) does
  std::vector<std::string> env;
  std::vector<char*> envp;

  ExecPlan(std::string program, std::vector<std::string>& command, const Lease& lease)
      : path(std::move(program)) {
    for (auto& arg : command) argv.push_back(arg.data());
    argv.push_back(nullptr);
    shell_argv.push_back(const_cast<char*>(kShell));
    shell_argv.push_back(path.data());
    shell_argv.insert(shell_argv.end(), argv.begin() + 1, argv.end());
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string_view var = *entry;
      if (!var.starts_with("DLOCK_KEY=") && !var.starts_with("DLOCK_OWNER=") &&
          !var.starts_with("DLOCK_FENCING_TOKEN=")) {
        env.emplace_back(var);
      }
    }
    env.push_back("DLOCK_KEY=" + lease.key());
    env.push_back("DLOCK_OWNER=" + lease.owner());
    env.push_back("DLOCK_FENCING_TOKEN=" + std::to_string(lease.token()));
    for (auto& var : env) envp.push_back(var.data());
    envp.push_back(nullptr);
  }
  ExecPlan(const ExecPlan&) = delete;  // the pointers point into its own strings
  ExecPlan& operator=(const ExecPlan&) = delete;
};

struct Spawned {
  pid_t child = -1;  // also its process group id
  pid_t sentinel = -1;
  int exec_error = 0;
};

// Starts the command (leader of its own process group; with the terminal if `take_terminal`)
// and its sentinel. Throws std::system_error when either cannot start.
Spawned spawn(const ExecPlan& plan, const SignalRelay& signals, bool take_terminal);

// Stopped as soon as the command has exited and reaped when `run` returns, so its exit
// overlaps the release instead of delaying it.
class SentinelGuard {
 public:
  explicit SentinelGuard(pid_t pid) : pid_(pid) {}
  SentinelGuard(const SentinelGuard&) = delete;
  SentinelGuard& operator=(const SentinelGuard&) = delete;
  ~SentinelGuard() {
    stop();
    ::waitpid(pid_, nullptr, 0);
  }
  void stop() const { ::kill(pid_, SIGKILL); }  // still unreaped, so the pid is still ours

 private:
  pid_t pid_;
};

// The command's exit status as a shell reports it (128+N for signal N), once it has exited.
// After a loss, the rest of its process group is killed first: until the command is reaped,
// its pid cannot name another group.
std::optional<int> reap(pid_t child, bool lost, bool job_control);

}  // namespace dlock::cli
