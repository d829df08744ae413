#include "backends/sqlite/shared_holds.hpp"

#include <algorithm>
#include <string>

#include "backends/sqlite/rows.hpp"
#include "backends/sqlite/statements.hpp"
#include "backends/sqlite/transaction.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::sqlite {
namespace {

using namespace statements;

constexpr std::int64_t kClaimUs = std::chrono::microseconds(backend::kWriterClaim).count();

std::int64_t now_us(Connection& connection) {
  Query query(connection, kNow);
  std::int64_t now = 0;
  query.one_row([&] { now = query.int64(0); });
  return now;
}

struct KeyRow {
  std::string owner;
  std::uint64_t token = 0;
  std::uint32_t holds = 0;
  std::int64_t expires_at = 0;
  std::int64_t acquired_at = 0;
};

std::optional<KeyRow> key_row(Connection& connection, std::string_view key) {
  Query query(connection, kKeyRow, key);
  query.bind(1, key);
  std::optional<KeyRow> row;
  query.one_row([&] {
    row = KeyRow{query.text(0), static_cast<std::uint64_t>(query.int64(1)), static_cast<std::uint32_t>(query.int64(2)),
                 query.int64(3), query.int64(4)};
  });
  return row;
}

std::vector<LockInfo> holders_at(Connection& connection, std::string_view key, std::int64_t now,
                                 std::optional<std::uint64_t> token) {
  Query query(connection, kSharedHolders, key);
  query.bind(1, key).bind(2, now);
  if (token) query.bind(3, static_cast<std::int64_t>(*token));
  std::vector<LockInfo> holders;
  while (query.step()) {
    LockInfo info = row_info(query, std::string(key), 0);
    info.mode = LockMode::shared;
    holders.push_back(std::move(info));
  }
  return holders;
}

// A re-entry statement (kSharedReenter, kExclusiveReenter): the token and holds, if it matched.
std::optional<backend::Acquired> reenter(Connection& connection, Sql which, const backend::AcquireRequest& request,
                                         std::int64_t now, std::int64_t ttl_us) {
  Query query(connection, which, request.key);
  query.bind(1, request.key).bind(2, request.owner).bind(3, now).bind(4, now + ttl_us);
  std::optional<backend::Acquired> acquired;
  query.one_row([&] {
    acquired = backend::Acquired{static_cast<std::uint64_t>(query.int64(0)), static_cast<std::uint32_t>(query.int64(1))};
  });
  return acquired;
}

void settle_marker(Connection& connection, std::string_view key, std::int64_t now) {
  Query(connection, kSharedSettle, key).bind(1, key).bind(2, now).run();
}

}  // namespace

backend::AcquireResult acquire_shared(Connection& connection, const backend::AcquireRequest& request,
                                      std::int64_t ttl_us) {
  const std::string_view key = request.key;
  Transaction transaction(connection);
  const std::int64_t now = now_us(connection);
  const auto row = key_row(connection, key);
  if (row && !row->owner.empty() && row->owner != kSharedOwner && row->expires_at > now) {
    // An exclusive holder: its own read re-enters (a writer may also read); anyone else waits.
    if (row->owner == request.owner && row->holds > 0) {
      const auto acquired = reenter(connection, kExclusiveReenter, request, now, ttl_us);
      transaction.commit();
      return *acquired;
    }
    LockInfo holder{std::string(key), row->owner, row->token, row->holds, ceil_ms(row->expires_at - now),
                    std::chrono::milliseconds((now - row->acquired_at) / 1000)};
    holder.evicted = row->holds == 0;
    const auto left = holder.ttl_left;
    if (!request.waiting) return backend::Busy{{std::move(holder)}, left};
    // A waiting reader: the readers' claim keeps the key from a writer that would take it back
    // before this reader's next attempt.
    Query(connection, kReadersClaim, key).bind(1, key).bind(2, now + kClaimUs).run();
    transaction.commit();
    return backend::Busy{{std::move(holder)}, std::min(left, std::chrono::milliseconds(backend::kWriterClaim / 2))};
  }
  Query(connection, kSharedPrune, key).bind(1, key).bind(2, now).run();
  if (const auto acquired = reenter(connection, kSharedReenter, request, now, ttl_us)) {
    Query(connection, kMarkerExtend, key).bind(1, key).bind(2, now + ttl_us).run();
    transaction.commit();
    return *acquired;
  }
  auto holders = holders_at(connection, key, now, std::nullopt);
  std::int64_t permits = 0, claim_until = 0;
  std::uint64_t claim_token = 0;
  {
    Query query(connection, kSharedMode, key);
    query.bind(1, key);
    query.one_row([&] {
      permits = query.int64(0);
      claim_until = query.int64(1);
      claim_token = static_cast<std::uint64_t>(query.int64(2));
    });
  }
  if (!holders.empty() && permits != request.permits) {
    throw backend::permits_disagree(key, static_cast<std::uint32_t>(permits), request.permits);
  }
  auto retry = std::chrono::milliseconds::max();
  std::int64_t latest = now + ttl_us;
  for (const auto& h : holders) {
    retry = std::min(retry, h.ttl_left);
    latest = std::max(latest, now + h.ttl_left.count() * 1000);
  }
  // Readers who waited behind an exclusive holder pass a writer's claim: they enter together.
  const bool claimed = row && claim_until > now && claim_token == row->token;
  if (claimed && request.waited_behind == 0) {
    return backend::Busy{std::move(holders), std::min(retry, ceil_ms(claim_until - now))};
  }
  if (request.permits != 0 && holders.size() >= request.permits) return backend::Busy{std::move(holders), retry};

  std::uint64_t token = 0;
  if (row) {
    token = row->token + 1;
  } else {
    Query query(connection, kSeq, key);
    query.one_row([&] { token = static_cast<std::uint64_t>(query.int64(0)) + 1; });
  }
  Query(connection, kMarkShared, key)
      .bind(1, key)
      .bind(2, static_cast<std::int64_t>(token))
      .bind(3, latest)
      .bind(4, now)
      .run();
  Query(connection, kSharedInsert, key)
      .bind(1, key)
      .bind(2, static_cast<std::int64_t>(token))
      .bind(3, request.owner)
      .bind(4, now + ttl_us)
      .bind(5, now)
      .run();
  Query(connection, kSharedPermits, key).bind(1, key).bind(2, static_cast<std::int64_t>(request.permits)).run();
  if (claimed) {
    Query(connection, kCarryClaim, key)
        .bind(1, key)
        .bind(2, static_cast<std::int64_t>(token))
        .bind(3, static_cast<std::int64_t>(row->token))
        .run();
  }
  transaction.commit();
  return backend::Acquired{token, 1};
}

std::vector<LockInfo> shared_holders(Connection& connection, std::string_view key,
                                     std::optional<std::uint64_t> token) {
  return holders_at(connection, key, now_us(connection), token);
}

void place_writer_claim(Connection& connection, std::string_view key) {
  Query(connection, kClaim, key).bind(1, key).bind(2, kClaimUs).run();
}

bool renew_shared(Connection& connection, const backend::LeaseRef& lease, std::int64_t ttl_us) {
  Transaction transaction(connection);
  const std::int64_t now = now_us(connection);
  Query query(connection, kSharedRenew, lease.key);
  query.bind(1, lease.key)
      .bind(2, lease.owner)
      .bind(3, static_cast<std::int64_t>(lease.token))
      .bind(4, now + ttl_us)
      .bind(5, now);
  if (!query.one_row([] {})) return false;
  Query(connection, kMarkerExtend, lease.key).bind(1, lease.key).bind(2, now + ttl_us).run();
  transaction.commit();
  return true;
}

std::optional<std::optional<std::uint32_t>> release_shared(Connection& connection, const backend::LeaseRef& lease) {
  Transaction transaction(connection);
  const std::int64_t now = now_us(connection);
  std::optional<std::int64_t> holds;
  {
    Query query(connection, kSharedFind, lease.key);
    query.bind(1, lease.key).bind(2, lease.owner).bind(3, static_cast<std::int64_t>(lease.token)).bind(4, now);
    query.one_row([&] { holds = query.int64(0); });
  }
  if (!holds) return std::nullopt;
  const auto token = static_cast<std::int64_t>(lease.token);
  if (*holds > 1) {
    std::uint32_t left = 0;
    Query query(connection, kSharedDecrement, lease.key);
    query.bind(1, lease.key).bind(2, token);
    query.one_row([&] { left = static_cast<std::uint32_t>(query.int64(0)); });
    transaction.commit();
    return std::optional<std::uint32_t>(left);
  }
  // The last hold, or an evicted holder acknowledging its loss: the hold ends.
  Query(connection, kSharedDelete, lease.key).bind(1, lease.key).bind(2, token).run();
  settle_marker(connection, lease.key, now);
  transaction.commit();
  return *holds == 1 ? std::optional<std::uint32_t>(0) : std::nullopt;
}

std::vector<LockInfo> force_release_shared(Connection& connection, std::string_view key, Eviction eviction,
                                           std::optional<std::uint64_t> token) {
  const std::int64_t now = now_us(connection);
  auto released = holders_at(connection, key, now, token);
  if (released.empty()) return released;
  if (eviction == Eviction::immediate) {
    Query query(connection, kSharedDelete, key);
    query.bind(1, key);
    if (token) query.bind(2, static_cast<std::int64_t>(*token));
    query.run();
    settle_marker(connection, key, now);
  } else {
    Query query(connection, kSharedEvict, key);
    query.bind(1, key).bind(3, now);
    if (token) query.bind(2, static_cast<std::int64_t>(*token));
    query.run();
  }
  return released;
}

void collect_idle_shared(Connection& connection) {
  Query(connection, kSharedCollect).run();
  connection.exec(
      "DELETE FROM dlock_modes WHERE claim_until <= dlock_now_us() "
      "AND NOT EXISTS (SELECT 1 FROM dlock_shared s WHERE s.name = dlock_modes.name)");
}

}  // namespace dlock::backends::sqlite
