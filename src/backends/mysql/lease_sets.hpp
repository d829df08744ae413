#pragma once

// mysql:// lease mode's sets of keys (Backend::acquire_set and release_set): one statement and
// one durable commit each way, with the single key's statements' rules (lease_mode.cpp hands
// over their text). A row those rules refuse fails the statement (kFail), which the server
// then undoes whole: all or nothing, without a transaction's round trips. Rows are locked in
// key order (the core sorts a set's keys, and the statements follow it), so two sets never
// wait for each other in a cycle.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/mysql/common.hpp"

namespace dlock::backends::mysql {

// A row with its lease's last hold, live, with no heir: what the plain release frees.
inline constexpr const char* kLastHold = "hold_count = 1 AND heir_owner = '' AND expires_at > UTC_TIMESTAMP(6)";
// An expression that fails its statement where it is evaluated: a scalar subquery of two rows
// (ER_SUBQUERY_NO_1_ROW). It names a column of the row, so the server evaluates it only for a
// row that reaches it, never ahead of time.
inline constexpr const char* kFail = "(SELECT hold_count FROM (SELECT 1 UNION ALL SELECT 2) AS refused)";

class LeaseSets {
 public:
  struct Sql {
    std::string table;
    // The acquire's ON DUPLICATE KEY UPDATE clause, all or nothing (its parameters: 9 times the
    // sessions of a waiting call, '' here: a set is a try-once attempt).
    std::string take_rules;
    // (owner, token, holds, microseconds left, held for) of the key's row.
    std::string holder_columns;
    // The plain release's SET list, given the new doorbell.
    std::function<std::string(const std::string& doorbell)> free_columns;
  };

  LeaseSets(ModeBackend& backend, Sql sql) : backend_(backend), sql_(std::move(sql)) {}

  // Every request (one owner, exclusive, distinct sorted keys) by the acquire's rules, each
  // key's doorbell taken on `connection`; false when a row refused, and nothing was taken
  // (give_back() then returns the doorbells).
  bool take(Connection& connection, std::span<const backend::AcquireRequest> requests);
  // Each key's row as a holder (an empty owner for none), in order.
  std::vector<LockInfo> rows(Connection& connection, std::span<const backend::AcquireRequest> requests);
  // The doorbells of the keys that `kept` (per request) does not name, if this session holds them.
  void give_back(Connection& connection, std::span<const backend::AcquireRequest> requests,
                 const std::vector<bool>& kept);

  // Frees every lease, each its row's last hold with no heir, marking its doorbell rung, and
  // answers which it freed (false: the lease's row is gone, and the lease with it). Nothing
  // when some lease is not such a hold, and then nothing changed. ring() follows.
  std::optional<std::vector<bool>> free(Connection& connection, std::span<const backend::LeaseRef> leases);
  // Rings the doorbells this session holds of the leases: their waiters wake.
  void ring(Connection& connection, std::span<const backend::LeaseRef> leases);

 private:
  // Gives back the doorbells of `keys` that this session holds.
  void drop_bells(Connection& connection, const std::vector<std::string_view>& keys);

  ModeBackend& backend_;
  Sql sql_;
};

}  // namespace dlock::backends::mysql
