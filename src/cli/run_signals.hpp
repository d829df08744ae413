#pragma once

// `dlock run`'s signals: the ones it handles become bytes on a pipe that its poll() loop reads.

#include <signal.h>

#include <array>
#include <vector>

namespace dlock::cli {

// Turns the signals `run` cares about into bytes on a pipe (handlers run on any thread, the
// client's renewal thread included) and remembers the dispositions dlock inherited, which the
// command gets back.
class SignalRelay {
 public:
  SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;
  ~SignalRelay() { restore(); }

  // Async-signal-safe, for the child before its exec.
  void restore() const noexcept;
  int fd() const noexcept;
  std::vector<int> take() const;
  // Signals dlock passes on to the command's process group.
  static bool forwarded(int signo) { return signo != SIGCHLD && signo != SIGTTOU; }

 private:
  static constexpr std::array<int, 6> kSignals{SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTTOU};
  std::array<struct sigaction, kSignals.size()> inherited_{};
};

}  // namespace dlock::cli
