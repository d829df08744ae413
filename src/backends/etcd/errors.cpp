#include "backends/etcd/errors.hpp"

#include "dlock/errors.hpp"

namespace dlock::backends::etcd {

void check(const grpc::Status& status, const std::string& what, std::string_view key, Write write) {
  if (status.ok()) return;
  const std::string message = "etcd could not " + what + " (" + status.error_message() + ")";
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED:
      if (write == Write::yes) {
        throw OutcomeUnknownError(message + ": the connection broke or timed out before the answer came",
                                  std::string(key), kName);
      }
      throw ConnectionError(message, kName, std::string(key));
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      throw ConfigurationError(message +
                                   ": give the URL a user that may read and write dlock's prefix "
                                   "(etcd://USER:PASSWORD@...)",
                               kName);
    case grpc::StatusCode::NOT_FOUND:
      if (status.error_message().find("lease not found") != std::string::npos) {
        throw LeaseGone(message, kName, std::string(key), true);
      }
      throw BackendError(message, kName, std::string(key));
    default:
      throw BackendError(message, kName, std::string(key));
  }
}

}  // namespace dlock::backends::etcd
