#include "backends/redis/keys.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <random>

#include "backends/redis/connection.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::redis {

namespace {
constexpr std::size_t kMaxNamespace = 64;
}

std::string take_namespace(core::UrlOptions& options, const std::string& scheme) {
  std::string ns = options.take_string("namespace").value_or(kDefaultNamespace);
  const bool valid = !ns.empty() && ns.size() <= kMaxNamespace && std::all_of(ns.begin(), ns.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
  if (!valid) {
    throw ConfigurationError(scheme + ":// namespace '" + ns + "' must be 1 to " + std::to_string(kMaxNamespace) +
                                 " letters, digits, '_', '-' or '.'",
                             scheme);
  }
  return ns;
}

std::vector<std::string> activity_counts(const Activity& delta) {
  std::vector<std::string> counts;
  for (const std::uint64_t n :
       {delta.acquisitions, delta.conflicts, delta.waits, delta.wait_us, delta.renewals, delta.losses}) {
    counts.push_back(std::to_string(n));
  }
  return counts;
}

void add_activity_reply(const redisReply* reply, Activity& total) {
  std::uint64_t* fields[] = {&total.acquisitions, &total.conflicts, &total.waits,
                             &total.wait_us,      &total.renewals,  &total.losses};
  for (std::size_t i = 0; i < std::size(fields) && i < reply->elements; ++i) {
    if (!is_nil(reply->element[i])) *fields[i] += std::stoull(text(reply->element[i]));
  }
}

std::string lex_bound(char kind, std::string_view key) {
  std::string bound(1, kind);
  bound += key;
  return bound;
}

LexRange list_range(std::string_view prefix, std::string_view after) {
  // [prefix, prefix with its last byte raised): bytewise, as the index sorts (score 0).
  std::string end(prefix);
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  LexRange range{prefix.empty() ? "-" : lex_bound('[', prefix), end.empty() ? "+" : lex_bound('(', end)};
  if (!after.empty() && after >= prefix) range.min = lex_bound('(', after);
  return range;
}

std::string random_hex() {
  std::random_device device;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08x%08x", device(), device());
  return hex;
}

std::uint64_t u64(const redisReply* reply) {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(integer(reply), 0));
}

LockInfo holder_info(std::string key, redisReply* const* row, const redisReply* waiters) {
  // A live lock has at least a millisecond left: waiters never wait for a 0 ms lease.
  LockInfo info{std::move(key), text(row[0]), u64(row[1]), static_cast<std::uint32_t>(u64(row[2])),
                std::chrono::milliseconds(std::max<std::int64_t>(integer(row[3]), 1)),
                std::chrono::milliseconds(integer(row[4]))};
  if (waiters) info.waiters = static_cast<std::uint32_t>(u64(waiters));
  info.evicted = info.hold_count == 0;
  info.mode = integer(row[5]) == 1 ? LockMode::shared : LockMode::exclusive;
  return info;
}

std::vector<LockInfo> holder_rows(const std::string& key, const redisReply* reply, std::size_t from) {
  std::vector<LockInfo> holders;
  for (std::size_t i = from; i + kRow <= reply->elements; i += kRow) holders.push_back(holder_info(key, reply->element + i));
  return holders;
}

AcquireArgs::AcquireArgs(const backend::AcquireRequest& request, bool fair, std::string_view waiter,
                         const std::string& alive_ms, bool readers_claims)
    : request_(request),
      ttl_ms_(std::to_string(request.ttl.count())),
      permits_(std::to_string(request.permits)),
      claim_ms_(std::to_string(backend::kWriterClaim.count())),
      fair_(fair),
      readers_claims_(readers_claims),
      waiter_(waiter),
      alive_ms_(alive_ms) {}

std::vector<std::string_view> AcquireArgs::get() const {
  const bool shared = request_.mode == LockMode::shared;
  return {request_.key,  request_.owner, ttl_ms_, fair_ ? "1" : "0", waiter_, alive_ms_, shared ? "1" : "0",
          permits_,      request_.waiting ? "1" : "0", claim_ms_, request_.waited_behind != 0 ? "1" : "0",
          readers_claims_ ? "1" : "0"};
}

backend::AcquireResult acquire_answer(const backend::AcquireRequest& request, const redisReply* reply) {
  const auto& e = reply->element;
  switch (integer(e[0])) {
    case 1:
      return backend::Acquired{u64(e[1]), static_cast<std::uint32_t>(u64(e[2]))};
    case 2:
      throw backend::permits_disagree(request.key, static_cast<std::uint32_t>(u64(e[1])), request.permits);
    default:
      return backend::Busy{holder_rows(std::string(request.key), reply, 3), std::chrono::milliseconds(integer(e[2]))};
  }
}

}  // namespace dlock::backends::redis
