#include "backends/etcd/connection.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>

#include <utility>

#include "dlock/errors.hpp"

namespace dlock::backends::etcd {
namespace {

using Clock = std::chrono::steady_clock;

// gRPC's target for the endpoints: a single one through DNS; several as one list of IPv4
// addresses (a host name resolved here, once), which gRPC's pick_first tries in order and
// leaves for the next when it breaks.
std::string target_of(const Settings& settings) {
  if (settings.endpoints.size() == 1) return "dns:///" + settings.endpoints.front();
  std::string target = "ipv4:";
  for (const auto& endpoint : settings.endpoints) {
    const auto colon = endpoint.rfind(':');
    const std::string host = endpoint.substr(0, colon);
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || !found) {
      throw ConnectionError("cannot resolve etcd server '" + host + "' of " + settings.shown +
                                " to an IPv4 address (several servers must each have one)",
                            kName);
    }
    char address[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, address, sizeof address);
    ::freeaddrinfo(found);
    target += (target.size() > 5 ? "," : "") + std::string(address) + endpoint.substr(colon);
  }
  return target;
}

bool token_expired(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
         status.error_message().find("invalid auth token") != std::string::npos;
}

}  // namespace

Connection::Connection(const Settings& settings) : settings_(settings) {
  grpc::ChannelArguments args;
  // A connection of its own per client, as a client of another process would have.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  {
    // gRPC's threads start here: they take no signal, like the library's own
    // (core/signal_free_thread.hpp), so that `dlock serve` still gets SIGTERM.
    sigset_t all, previous;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &previous);
    channel_ = grpc::CreateCustomChannel(target_of(settings_), grpc::InsecureChannelCredentials(), args);
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }
  kv_ = pb::KV::NewStub(channel_);
  lease_ = pb::Lease::NewStub(channel_);
  watch_ = pb::Watch::NewStub(channel_);
  if (!channel_->WaitForConnected(std::chrono::system_clock::now() + settings_.connect_timeout)) {
    throw ConnectionError("cannot reach the etcd cluster of " + settings_.shown + " within " +
                              std::to_string(settings_.connect_timeout.count()) + " ms",
                          kName);
  }
  if (!settings_.user.empty()) authenticate();
}

void Connection::authenticate() {
  pb::AuthenticateRequest request;
  request.set_name(settings_.user);
  request.set_password(settings_.password);
  pb::AuthenticateResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + settings_.connect_timeout);
  const auto status = pb::Auth::NewStub(channel_)->Authenticate(&context, request, &response);
  if (!status.ok() && status.error_code() != grpc::StatusCode::UNAVAILABLE &&
      status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    throw ConfigurationError("etcd refused the credentials of user '" + settings_.user + "' on " +
                                 settings_.shown + " (" + status.error_message() + ")",
                             kName);
  }
  check(status, "authenticate", {});
  std::lock_guard lock(token_mutex_);
  token_ = response.token();
}

std::unique_ptr<grpc::ClientContext> Connection::context(std::optional<Clock::time_point> deadline) {
  auto context = std::make_unique<grpc::ClientContext>();
  // gRPC takes deadlines on the system clock only.
  if (deadline) context->set_deadline(std::chrono::system_clock::now() + (*deadline - Clock::now()));
  std::lock_guard lock(token_mutex_);
  if (!token_.empty()) context->AddMetadata("token", token_);
  return context;
}

template <class Call>
grpc::Status Connection::with_token(Call&& call) {
  auto status = call(*context(Clock::now() + settings_.connect_timeout));
  if (!token_expired(status) || settings_.user.empty()) return status;
  authenticate();
  return call(*context(Clock::now() + settings_.connect_timeout));
}

pb::RangeResponse Connection::range(const pb::RangeRequest& request, const std::string& what,
                                    std::string_view key) {
  pb::RangeResponse response;
  check(with_token([&](grpc::ClientContext& c) { return kv_->Range(&c, request, &response); }), what, key);
  return response;
}

pb::TxnResponse Connection::txn(const pb::TxnRequest& request, const std::string& what,
                                std::string_view key) {
  pb::TxnResponse response;
  check(with_token([&](grpc::ClientContext& c) { return kv_->Txn(&c, request, &response); }), what, key,
        Write::yes);
  return response;
}

pb::LeaseGrantResponse Connection::grant(std::chrono::seconds ttl) {
  pb::LeaseGrantRequest request;
  request.set_ttl(ttl.count());
  pb::LeaseGrantResponse response;
  check(with_token([&](grpc::ClientContext& c) { return lease_->LeaseGrant(&c, request, &response); }),
        "grant a lease", {});
  if (!response.error().empty())
    throw BackendError("etcd could not grant a lease (" + response.error() + ")", kName);
  return response;
}

void Connection::revoke(std::int64_t lease, std::chrono::milliseconds timeout) {
  pb::LeaseRevokeRequest request;
  request.set_id(lease);
  pb::LeaseRevokeResponse response;
  lease_->LeaseRevoke(context(Clock::now() + timeout).get(), request, &response);
}

std::optional<std::int64_t> Connection::keep_alive(std::int64_t lease, Clock::time_point deadline) {
  // A stream per keep-alive: its deadline bounds the wait for the answer, which a long-lived
  // stream's blocking read could not.
  auto c = context(deadline);
  auto stream = lease_->LeaseKeepAlive(c.get());
  pb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  pb::LeaseKeepAliveResponse response;
  const bool answered = stream->Write(request) && stream->Read(&response);
  stream->WritesDone();
  c->TryCancel();
  stream->Finish();
  if (!answered) return std::nullopt;
  return response.ttl();
}

}  // namespace dlock::backends::etcd
