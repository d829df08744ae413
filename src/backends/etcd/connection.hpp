#pragma once

// One gRPC channel to the cluster, with the stubs of the services dlock uses, the
// authentication token every request carries (when the URL names a user), and a deadline on
// every request. Thread-safe: gRPC's stubs may be called from any thread.

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "backends/etcd/errors.hpp"
#include "backends/etcd/settings.hpp"
#include "rpc.grpc.pb.h"

namespace dlock::backends::etcd {

namespace pb = etcdserverpb;

class Connection {
 public:
  // Connects (and authenticates) within the settings' connect_timeout; throws ConnectionError
  // naming the servers, or ConfigurationError for refused credentials.
  explicit Connection(const Settings& settings);

  const Settings& settings() const { return settings_; }

  pb::RangeResponse range(const pb::RangeRequest& request, const std::string& what, std::string_view key);
  pb::TxnResponse txn(const pb::TxnRequest& request, const std::string& what, std::string_view key);
  pb::LeaseGrantResponse grant(std::chrono::seconds ttl);
  // Best effort: the lease runs out by itself if the revoke does not arrive.
  void revoke(std::int64_t lease, std::chrono::milliseconds timeout);
  // One keep-alive of `lease`, answered before `deadline`: the lease's TTL left (0 or less: the
  // lease is gone), or nothing when no answer came.
  std::optional<std::int64_t> keep_alive(std::int64_t lease, std::chrono::steady_clock::time_point deadline);

  // A context for a request or stream: the token, and a deadline when given.
  std::unique_ptr<grpc::ClientContext> context(std::optional<std::chrono::steady_clock::time_point> deadline);
  pb::Watch::Stub& watch_stub() { return *watch_; }

 private:
  void authenticate();
  // Calls `call` with a fresh context; once more after authenticating again if the token had
  // expired (etcd's simple tokens last 5 minutes by default).
  template <class Call>
  grpc::Status with_token(Call&& call);

  const Settings settings_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::KV::Stub> kv_;
  std::unique_ptr<pb::Lease::Stub> lease_;
  std::unique_ptr<pb::Watch::Stub> watch_;
  std::mutex token_mutex_;
  std::string token_;
};

}  // namespace dlock::backends::etcd
