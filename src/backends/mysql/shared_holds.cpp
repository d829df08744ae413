// What lease and session modes' shared holds have in common (shared_holds.hpp).

#include "backends/mysql/shared_holds.hpp"

#include <algorithm>

#include "dlock/errors.hpp"

namespace dlock::backends::mysql {
std::chrono::milliseconds soonest_end(const std::vector<LockInfo>& holders, std::chrono::milliseconds none) {
  if (holders.empty()) return none;
  auto soonest = holders.front().ttl_left;
  for (const LockInfo& h : holders) soonest = std::min(soonest, h.ttl_left);
  return soonest;
}

SharedHolds::SharedHolds(ModeBackend& backend, const std::string& table)
    : backend_(backend),
      claim_("INSERT INTO `" + table + "_claim` (name, token, expires_at) VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ?"
             " MICROSECOND) ON DUPLICATE KEY UPDATE token = VALUES(token), expires_at = VALUES(expires_at)") {}

backend::Busy SharedHolds::writer_refused(Connection& connection, const backend::AcquireRequest& request,
                                          std::uint64_t token) {
  auto seen = holders(connection, request.key);
  auto retry = soonest_end(seen, kSharedRecheck);
  if (request.waiting) {
    backend_.with_retries(request.key, [&] {
      return connection.execute(claim_, {request.key, static_cast<std::int64_t>(token), ttl_us(backend::kWriterClaim)});
    });
    retry = std::min<std::chrono::milliseconds>(retry, backend::kWriterClaim / 2);
  }
  return backend::Busy{std::move(seen), retry};
}

SharedVerdict judge_shared(const backend::AcquireRequest& r, std::vector<LockInfo>& holders,
                           std::optional<std::uint32_t> permits, std::optional<std::chrono::milliseconds> claim_left,
                           std::chrono::milliseconds none_left) {
  for (const LockInfo& h : holders) {
    if (h.owner == r.owner && h.hold_count > 0) return {&h, std::nullopt};
  }
  if (permits && *permits != r.permits) {
    throw backend::permits_disagree(r.key, *permits, r.permits);
  }
  const auto retry = soonest_end(holders, none_left);
  if (claim_left && r.waited_behind == 0) return {nullptr, backend::Busy{holders, std::min(retry, *claim_left)}};
  if (r.permits != 0 && holders.size() >= r.permits) return {nullptr, backend::Busy{holders, retry}};
  return {};
}

}  // namespace dlock::backends::mysql
