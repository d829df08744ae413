#pragma once

// try_lock_for and try_lock_until of dlock's TimedLockable types (Mutex, MultiMutex), for any
// clock and duration, from the steady-clock deadline each type takes.

#include <chrono>
#include <type_traits>

namespace dlock::detail {

// Derived provides bool try_lock_for_steady(std::chrono::steady_clock::duration) and
// bool try_lock_until_steady(std::chrono::steady_clock::time_point), and befriends this.
template <class Derived>
class TimedTryLock {
 public:
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    // A timeout beyond the steady clock's range (hours::max(), say) waits forever rather
    // than overflowing.
    using Steady = std::chrono::steady_clock;
    if (std::chrono::duration<double>(timeout) >= std::chrono::duration<double>(Steady::duration::max()) / 2) {
      return self().try_lock_for_steady(Steady::duration::max());
    }
    return self().try_lock_for_steady(std::chrono::ceil<Steady::duration>(timeout));
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    if constexpr (std::is_same_v<Clock, std::chrono::steady_clock>) {
      return self().try_lock_until_steady(std::chrono::time_point_cast<std::chrono::steady_clock::duration>(deadline));
    } else {
      return try_lock_for(deadline - Clock::now());
    }
  }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

}  // namespace dlock::detail
