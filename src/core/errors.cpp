#include "dlock/errors.hpp"

#include "dlock/backend.hpp"
#include "dlock/types.hpp"

namespace dlock {

Error::Error(ErrorKind kind, const std::string& message, std::string key, std::string backend,
             bool retryable)
    : std::runtime_error(message),
      kind_(kind),
      key_(std::move(key)),
      backend_(std::move(backend)),
      retryable_(retryable) {}

const char* to_string(LossReason reason) noexcept {
  switch (reason) {
    case LossReason::expired:
      return "expired";
    case LossReason::not_owner:
      return "not_owner";
    case LossReason::renewal_failed:
      return "renewal_failed";
  }
  return "unknown";
}

const char* to_string(LockMode mode) noexcept {
  switch (mode) {
    case LockMode::exclusive:
      return "exclusive";
    case LockMode::shared:
      return "shared";
  }
  return "unknown";
}

namespace backend {
namespace {

std::string permits_text(std::uint32_t permits) {
  if (permits == 0) return "no limit on shared holders (a read-write lock)";
  return std::to_string(permits) + (permits == 1 ? " permit" : " permits") + " (a semaphore)";
}

}  // namespace

InvalidArgument permits_disagree(std::string_view key, std::uint32_t held, std::uint32_t asked,
                                 std::string_view state) {
  return InvalidArgument(std::string("'").append(key) + "' is " + std::string(state) + " with " + permits_text(held) +
                             " and this request asks for " + permits_text(asked) +
                             ": every client of one semaphore or read-write lock must agree",
                         std::string(key));
}

}  // namespace backend
}  // namespace dlock
