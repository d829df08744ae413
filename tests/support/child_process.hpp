#pragma once

// Child processes for tests: spawned with posix_spawn (never fork: the test process owns
// Clients, and a Client owns a renewal thread), always reaped.
//
// Not thread-safe: one thread owns a ChildProcess.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dlock::test {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with argv and this process's environment. Throws
  // std::system_error when it cannot be started.
  explicit ChildProcess(const std::vector<std::string>& argv);
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills (SIGKILL) and reaps a child still running.
  ~ChildProcess();

  pid_t pid() const noexcept { return pid_; }
  bool reaped() const noexcept { return status_.has_value(); }

  // Sends `signal`; a no-op once reaped.
  void kill(int signal) const;
  // Waits up to `timeout` for the child to end. Returns its exit code, or 128 + signal
  // number when a signal ended it; nothing when it is still running at the deadline.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  // Waits however long it takes.
  int wait();

 private:
  bool try_reap(bool block);

  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Reads a whole file; nothing when it does not exist (yet).
std::optional<std::string> read_file(const std::string& path);
// Writes `text` to `path` atomically (temporary file, then rename).
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace dlock::test
