#include "dlock/errors.hpp"

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

}  // namespace dlock
