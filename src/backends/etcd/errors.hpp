#pragma once

// etcd's gRPC answers as dlock errors.

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

#include "dlock/errors.hpp"

namespace dlock::backends::etcd {

inline constexpr const char* kName = "etcd";

// Whether a request writes: a write whose answer was lost may have been made.
enum class Write { no, yes };

// A write named a lease the cluster no longer has (it expired before a keep-alive reached it,
// or was revoked): the session is over, and the write may be made again under a new one.
class LeaseGone : public BackendError {
 public:
  using BackendError::BackendError;
};

// Throws the dlock error for a status other than OK: ConnectionError when the cluster cannot
// be reached, OutcomeUnknownError for a write whose answer did not come, ConfigurationError for
// refused credentials or permissions, LeaseGone, BackendError otherwise. `what`: the request, for the
// message; `key`: the lock key it was about, if any.
void check(const grpc::Status& status, const std::string& what, std::string_view key,
           Write write = Write::no);

}  // namespace dlock::backends::etcd
