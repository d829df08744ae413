#include "cli/run_signals.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace dlock::cli {
namespace {

// Never closed: a handler may still be running on another thread when `run` returns.
int g_signal_pipe[2] = {-1, -1};

extern "C" void relay_signal(int signo) {
  const int saved_errno = errno;
  const auto byte = static_cast<unsigned char>(signo);
  if (::write(g_signal_pipe[1], &byte, 1) < 0) {
    // The pipe is full of unread signals; the main loop wakes up anyway.
  }
  errno = saved_errno;
}

}  // namespace

SignalRelay::SignalRelay() {
  if (g_signal_pipe[0] < 0 && ::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  struct sigaction relay {};
  relay.sa_handler = relay_signal;
  relay.sa_flags = SA_RESTART;  // the renewal thread's I/O must not see EINTR
  sigemptyset(&relay.sa_mask);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (std::size_t i = 0; i < kSignals.size(); ++i) {
    const int signo = kSignals[i];
    ::sigaction(signo, nullptr, &inherited_[i]);
    if (signo == SIGTTOU) {
      ::sigaction(signo, &ignore, nullptr);  // tcsetpgrp() from a background group
    } else if (signo == SIGCHLD || inherited_[i].sa_handler != SIG_IGN) {
      // A signal dlock was started with ignored (nohup, `cmd &` in a script) stays ignored.
      ::sigaction(signo, &relay, nullptr);
    }
  }
}

void SignalRelay::restore() const noexcept {
  for (std::size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &inherited_[i], nullptr);
}

int SignalRelay::fd() const noexcept { return g_signal_pipe[0]; }

std::vector<int> SignalRelay::take() const {
  std::vector<int> signals;
  unsigned char buffer[64];
  ssize_t n = 0;
  while ((n = ::read(g_signal_pipe[0], buffer, sizeof buffer)) > 0)
    signals.insert(signals.end(), buffer, buffer + n);
  return signals;
}

}  // namespace dlock::cli
