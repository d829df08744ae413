#pragma once

// A program the tests start, its stdout and stderr captured through pipes: the CLI and serve
// suites drive the real dlock binaries with it.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dlock::test {

struct Result {
  int exit_code = -1;  // 128+N when killed by signal N, as a shell reports it
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};

// The dlock binary under test: $DLOCK_TEST_BINARY (CI also runs the suites against the
// statically linked release build, the one users get), else the one built beside the tests.
const char* dlock_binary();

// "a b c", for messages.
std::string describe(const std::vector<std::string>& argv);

// A file's whole text; empty when it cannot be read (not written yet).
std::string read_text(const std::string& path);
// A new directory under the system's temporary directory, named PREFIX-XXXXXX.
std::string make_temp_dir(const std::string& prefix);
// This process's environment without any DLOCK_* variable, then `extra` (NAME=VALUE each).
std::vector<std::string> environment_without_dlock(const std::vector<std::string>& extra = {});

// True once `pid` has exited. Zombies count as dead: the container's init may never reap the
// orphans of a killed dlock.
bool is_dead(pid_t pid);
// The live processes (zombies count as gone) whose command line is a `dlock acquire` of `key`:
// once `dlock acquire` itself has exited, the keepers it left holding the lock.
std::vector<pid_t> keepers_of(const std::string& key);

class Process {
 public:
  // Starts argv[0] (a path) with exactly `env`, stdin from /dev/null, and the signals a test
  // runner may ignore or block back at their defaults.
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& env);
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  // Kills the program if it was not waited for.
  ~Process();

  pid_t pid() const { return pid_; }
  void signal(int signo) const;

  // The first line of stdout, without its newline, once it is complete; nothing if stdout
  // closed or `timeout` passed first.
  std::optional<std::string> first_line(std::chrono::milliseconds timeout);

  // Waits for the exit, collecting output. After `timeout` the process is killed and the
  // test fails. Output still held open by processes it left behind is not waited for.
  Result wait(std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  // Reads what the pipes hold, waiting up to `timeout_ms` for it.
  void drain(int timeout_ms);

  std::string command_;
  std::chrono::steady_clock::time_point start_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool reaped_ = false;
  Result result_;
};

}  // namespace dlock::test
