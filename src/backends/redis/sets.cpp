#include "backends/redis/sets.hpp"

#include "backends/redis/connection.hpp"

namespace dlock::backends::redis {

SetCall::SetCall(const std::string& ns, const StoreKeys& store, bool bells) : ns_(ns), store_(store), bells_(bells) {
  keys_ = {store_.held, store_.known};
}

void SetCall::add(std::string_view key, std::vector<std::string> values) {
  const LockKeys& lock = locks_.emplace_back(ns_, key, store_.held, store_.known);
  const auto own_keys = lock.own();
  keys_.insert(keys_.end(), own_keys.begin(), own_keys.end());
  if (bells_) {
    keys_.push_back(own(lock.sleepers()));
    keys_.push_back(own(lock.bell()));
  }
  args_.push_back(key);
  for (auto& value : values) args_.push_back(own(std::move(value)));
}

SetCall SetCall::acquire(const std::string& ns, const StoreKeys& store,
                         std::span<const backend::AcquireRequest> requests, bool fair, bool readers_claims) {
  SetCall call(ns, store, false);
  call.args_ = {fair ? "1" : "0", call.own(std::to_string(backend::kWriterClaim.count())), readers_claims ? "1" : "0"};
  for (const auto& r : requests) {
    call.add(r.key, {std::string(r.owner), std::to_string(r.ttl.count()), r.mode == LockMode::shared ? "1" : "0",
                     std::to_string(r.permits)});
  }
  return call;
}

SetCall SetCall::release(const std::string& ns, const StoreKeys& store, std::span<const backend::LeaseRef> leases,
                         std::optional<std::string_view> alive_ms) {
  SetCall call(ns, store, alive_ms.has_value());
  if (alive_ms) call.args_.push_back(*alive_ms);
  for (const auto& lease : leases) call.add(lease.key, {std::string(lease.owner), std::to_string(lease.token)});
  return call;
}

backend::AcquireSetResult acquire_set_answer(std::span<const backend::AcquireRequest> requests, const redisReply* reply) {
  const auto& e = reply->element;
  if (integer(e[0]) == 0) {
    const auto index = static_cast<std::size_t>(u64(e[1]));
    return backend::SetBusy{index, std::get<backend::Busy>(acquire_answer(requests[index], e[2]))};
  }
  std::vector<backend::Acquired> acquired;
  acquired.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    acquired.push_back(std::get<backend::Acquired>(acquire_answer(requests[i], e[i + 1])));
  }
  return acquired;
}

std::optional<std::uint32_t> holds_left(const redisReply* reply) {
  const auto left = integer(reply);
  if (left < 0) return std::nullopt;
  return static_cast<std::uint32_t>(left);
}

}  // namespace dlock::backends::redis
