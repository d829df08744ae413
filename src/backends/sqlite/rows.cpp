#include "backends/sqlite/rows.hpp"

#include <algorithm>
#include <utility>

namespace dlock::backends::sqlite {
namespace {

constexpr std::int64_t kMaxTtlMs = 100LL * 365 * 24 * 3'600'000;

}  // namespace

std::chrono::milliseconds ceil_ms(std::int64_t us) {
  return std::chrono::milliseconds(us <= 0 ? 0 : (us + 999) / 1000);
}

std::int64_t ttl_us(std::chrono::milliseconds ttl) {
  return std::clamp<std::int64_t>(ttl.count(), 0, kMaxTtlMs) * 1000;
}

LockInfo row_info(const Query& query, std::string key, int first) {
  LockInfo info{std::move(key), query.text(first), static_cast<std::uint64_t>(query.int64(first + 1)),
                static_cast<std::uint32_t>(query.int64(first + 2)), ceil_ms(query.int64(first + 3)),
                std::chrono::milliseconds(std::max<std::int64_t>(query.int64(first + 4), 0) / 1000)};
  info.evicted = info.hold_count == 0;
  return info;
}

std::optional<backend::Busy> refusal(const Query& query, std::string_view key, std::string_view owner, int first) {
  const std::string_view holder = query.view(first);
  const std::int64_t claim_left = query.int64(first + 5);
  if ((holder.empty() || query.int64(first + 3) <= 0) && claim_left > 0) return backend::Busy{{}, ceil_ms(claim_left)};
  if (holder == owner && query.int64(first + 2) > 0) return std::nullopt;
  LockInfo info = row_info(query, std::string(key), first);
  const auto left = info.ttl_left;
  return backend::Busy{{std::move(info)}, left};
}

}  // namespace dlock::backends::sqlite
