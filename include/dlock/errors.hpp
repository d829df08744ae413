#pragma once

// The exceptions dlock throws. Every one derives from dlock::Error, which carries the key and
// backend involved and whether retrying the same call may succeed. Contention is never an
// error: try_lock() returns false and Client::try_acquire() returns an empty Attempt.

#include <stdexcept>
#include <string>

#include "dlock/export.hpp"

namespace dlock {

enum class ErrorKind {
  invalid_argument,  // bad key, TTL, owner or duration: fix the call
  configuration,     // bad URL, unknown option, unusable path, missing schema: fix the setup
  connection,        // the backend could not be reached: retryable
  lock_lost,         // release/renew found the lease no longer ours (expired, force-released, taken over)
  outcome_unknown,   // a request was sent but its effect is unknown (e.g. timeout): retryable
  backend,           // any other failure reported by the store
};

class DLOCK_EXPORT Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, std::string key = {}, std::string backend = {},
        bool retryable = false);

  ErrorKind kind() const noexcept { return kind_; }
  // The lock key the failing call was about; empty when the error is not about one key.
  const std::string& key() const noexcept { return key_; }
  // The backend name ("sqlite", "local", ...); empty before a backend was chosen.
  const std::string& backend() const noexcept { return backend_; }
  // True when the same call may succeed later without any change by the caller.
  bool retryable() const noexcept { return retryable_; }

 private:
  ErrorKind kind_;
  std::string key_;
  std::string backend_;
  bool retryable_;
};

class DLOCK_EXPORT InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message, std::string key = {})
      : Error(ErrorKind::invalid_argument, message, std::move(key)) {}
};

class DLOCK_EXPORT ConfigurationError : public Error {
 public:
  explicit ConfigurationError(const std::string& message, std::string backend = {})
      : Error(ErrorKind::configuration, message, {}, std::move(backend)) {}
};

class DLOCK_EXPORT ConnectionError : public Error {
 public:
  ConnectionError(const std::string& message, std::string backend, std::string key = {})
      : Error(ErrorKind::connection, message, std::move(key), std::move(backend), true) {}
};

class DLOCK_EXPORT LockLostError : public Error {
 public:
  LockLostError(const std::string& message, std::string key, std::string backend = {})
      : Error(ErrorKind::lock_lost, message, std::move(key), std::move(backend)) {}
};

class DLOCK_EXPORT OutcomeUnknownError : public Error {
 public:
  OutcomeUnknownError(const std::string& message, std::string key, std::string backend)
      : Error(ErrorKind::outcome_unknown, message, std::move(key), std::move(backend), true) {}
};

class DLOCK_EXPORT BackendError : public Error {
 public:
  BackendError(const std::string& message, std::string backend, std::string key = {},
               bool retryable = false)
      : Error(ErrorKind::backend, message, std::move(key), std::move(backend), retryable) {}
};

}  // namespace dlock
