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

SharedHolds::SharedHolds(ModeBackend& backend, const std::string& table, const std::string& key_table)
    : backend_(backend),
      // On the key's token as the claim is written, not the older one the writer read: a reader
      // let in since would have left the claim behind at once. Never lowered (carry_claim).
      claim_("INSERT INTO `" + table + "_claim` (name, token, expires_at) SELECT k.name, GREATEST(k.token, ?),"
             " UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND FROM `" + key_table + "` AS k WHERE k.name = ?"
             " ON DUPLICATE KEY UPDATE token = GREATEST(`" + table + "_claim`.token, VALUES(token)),"
             " expires_at = VALUES(expires_at)"),
      carry_claim_("UPDATE `" + table + "_claim` SET token = ? WHERE name = ? AND token >= ? AND expires_at > UTC_TIMESTAMP(6)") {}

void SharedHolds::claim_for_writer(Connection& connection, std::string_view key, std::uint64_t token) {
  backend_.with_retries(key, [&] {
    return connection.execute(claim_, {static_cast<std::int64_t>(token), ttl_us(backend::kWriterClaim), key});
  });
}

void SharedHolds::carry_claim(Connection& connection, std::string_view key, std::uint64_t was, std::uint64_t now) {
  connection.execute(carry_claim_, {static_cast<std::int64_t>(now), key, static_cast<std::int64_t>(was)});
}

backend::Busy SharedHolds::writer_refused(Connection& connection, const backend::AcquireRequest& request,
                                          std::uint64_t token) {
  auto seen = holders(connection, request.key);
  auto retry = soonest_end(seen, kSharedRecheck);
  if (request.waiting) {
    claim_for_writer(connection, request.key, token);
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
