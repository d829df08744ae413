#pragma once

// Background threads of the library's own take no signal: the application may block a signal
// in its threads to wait for it (dlock serve sigwaits for SIGTERM), and a thread it does not
// know of, which left it unblocked, would take it instead.

#include <signal.h>

#include <thread>
#include <utility>

namespace dlock::core {

template <class Function>
std::thread signal_free_thread(Function&& function) {
  sigset_t all;
  sigset_t previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);  // the new thread inherits this mask
  try {
    std::thread thread(std::forward<Function>(function));
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    return thread;
  } catch (...) {
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    throw;
  }
}

}  // namespace dlock::core
