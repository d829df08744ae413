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

LockInfo lock_info(std::string key, const redisReply* owner, const redisReply* token, const redisReply* holds,
                   const redisReply* pttl, const redisReply* held_ms, const redisReply* waiters) {
  // A live lock has at least a millisecond left: waiters never wait for a 0 ms lease.
  LockInfo info{std::move(key), text(owner), u64(token), static_cast<std::uint32_t>(u64(holds)),
                std::chrono::milliseconds(std::max<std::int64_t>(integer(pttl), 1)),
                std::chrono::milliseconds(integer(held_ms))};
  if (waiters) info.waiters = static_cast<std::uint32_t>(u64(waiters));
  info.evicted = info.hold_count == 0;
  return info;
}

}  // namespace dlock::backends::redis
