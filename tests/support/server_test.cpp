#include "support/server_test.hpp"

#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

namespace dlock::test {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): nothing sets it
  if (!value || !*value) return std::nullopt;
  return std::string(value);
}

long long ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

bool eventually(const std::function<bool()>& condition, std::chrono::steady_clock::duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string random_hex(int digits) {
  static std::mutex mutex;
  static std::mt19937_64 generator{std::random_device{}()};
  std::lock_guard lock(mutex);
  std::string out;
  for (int i = 0; i < digits; ++i) out += "0123456789abcdef"[generator() % 16];
  return out;
}

std::string with_option(const std::string& url, const std::string& option) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + option;
}

}  // namespace dlock::test
