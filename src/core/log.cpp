#include "core/log.hpp"

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

namespace dlock {
namespace {

std::mutex& handler_mutex() {
  static std::mutex m;
  return m;
}

using Handler = std::function<void(LogLevel, std::string_view)>;

// Shared, so a line being logged keeps the handler it started with alive, and the handler runs
// without the mutex held: a handler may itself log, or set another handler.
std::shared_ptr<const Handler>& handler() {
  static std::shared_ptr<const Handler> h = std::make_shared<const Handler>([](LogLevel level, std::string_view message) {
    if (level < LogLevel::warning) return;
    std::fprintf(stderr, "dlock: %.*s\n", static_cast<int>(message.size()), message.data());
  });
  return h;
}

}  // namespace

void set_log_handler(std::function<void(LogLevel, std::string_view)> new_handler) {
  auto replacement = new_handler ? std::make_shared<const Handler>(std::move(new_handler)) : nullptr;
  std::lock_guard lock(handler_mutex());
  handler() = std::move(replacement);
}

namespace core {

void log(LogLevel level, std::string_view message) noexcept {
  try {
    std::shared_ptr<const Handler> current;
    {
      std::lock_guard lock(handler_mutex());
      current = handler();
    }
    if (current) (*current)(level, message);
  } catch (...) {  // a throwing handler must not turn unlock() into std::terminate
  }
}

}  // namespace core
}  // namespace dlock
