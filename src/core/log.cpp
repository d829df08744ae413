#include "core/log.hpp"

#include <cstdio>
#include <mutex>
#include <string>

namespace dlock {
namespace {

std::mutex& handler_mutex() {
  static std::mutex m;
  return m;
}

std::function<void(LogLevel, std::string_view)>& handler() {
  static std::function<void(LogLevel, std::string_view)> h =
      [](LogLevel level, std::string_view message) {
        if (level < LogLevel::warning) return;
        std::fprintf(stderr, "dlock: %.*s\n", static_cast<int>(message.size()), message.data());
      };
  return h;
}

}  // namespace

void set_log_handler(std::function<void(LogLevel, std::string_view)> new_handler) {
  std::lock_guard lock(handler_mutex());
  handler() = std::move(new_handler);
}

namespace core {

void log(LogLevel level, std::string_view message) noexcept {
  try {
    std::lock_guard lock(handler_mutex());
    if (handler()) handler()(level, message);
  } catch (...) {  // a throwing handler must not turn unlock() into std::terminate
  }
}

}  // namespace core
}  // namespace dlock
