// mysql:// lease mode's sets of keys (lease_sets.hpp).

#include "backends/mysql/lease_sets.hpp"

#include <mysqld_error.h>

#include <algorithm>

#include "dlock/errors.hpp"

namespace dlock::backends::mysql {
namespace {

// `n` placeholders, comma-separated.
std::string marks(std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += i == 0 ? "?" : ", ?";
  return out;
}

// The keys of a set, as parameters.
template <class Item>
std::vector<Param> key_params(std::span<const Item> items) {
  std::vector<Param> params;
  for (const Item& item : items) params.emplace_back(item.key);
  return params;
}

// The rows of a set's keys (the name first), each at its key's index; none for a key without
// a row. A row of any other key is the store's error.
template <class Item>
std::vector<Row> by_key(std::span<const Item> items, std::vector<Row> rows) {
  std::vector<Row> out(items.size());
  for (Row& row : rows) {
    const std::string key = row.at(0).value_or("");
    const auto at = std::lower_bound(items.begin(), items.end(), key,
                                     [](const Item& item, const std::string& k) { return item.key < k; });
    if (at == items.end() || at->key != key) {
      throw BackendError("a set statement returned a key it was not asked for", kName, key);
    }
    out[static_cast<std::size_t>(at - items.begin())] = std::move(row);
  }
  return out;
}

// Runs `statement`; false when it failed on kFail (the server undid it).
template <class F>
bool unless_refused(ModeBackend& backend, std::string_view key, F&& statement) {
  return backend.with_retries(key, [&] {
    try {
      statement();
      return true;
    } catch (const SqlError& e) {
      if (e.code != ER_SUBQUERY_NO_1_ROW) throw;
      return false;
    }
  });
}

}  // namespace

bool LeaseSets::take(Connection& connection, std::span<const backend::AcquireRequest> requests) {
  // The single acquire's statement (lease_mode.cpp) with a row per key, in key order (as the
  // core sorts them). A row list, not a derived table: the server sorts and copies nothing.
  const std::string row = "(?, ?, (SELECT v FROM `" + sql_.table + "_seq` WHERE id = 0 LOCK IN SHARE MODE) + 1, 1,"
                          " UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,"
                          " IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 1, COALESCE(GET_LOCK(?, 0), 0)), CONNECTION_ID())";
  std::string upsert = "INSERT INTO `" + sql_.table +
                       "` (name, owner, token, hold_count, acquired_at, expires_at, doorbell, session_id) VALUES " + row;
  for (std::size_t i = 1; i < requests.size(); ++i) upsert += ", " + row;
  upsert += " " + sql_.take_rules;
  std::vector<std::string> bells;
  bells.reserve(requests.size());
  std::vector<Param> params;
  for (const auto& r : requests) {
    bells.push_back(backend_.bell_name(r.key));
    params.insert(params.end(), {r.key, r.owner, ttl_us(r.ttl), bells.back(), bells.back()});
  }
  params.insert(params.end(), 9, Param(std::string_view()));
  return unless_refused(backend_, requests.front().key, [&] { connection.execute(upsert, params); });
}

std::vector<LockInfo> LeaseSets::rows(Connection& connection, std::span<const backend::AcquireRequest> requests) {
  const std::string read = "SELECT name, " + sql_.holder_columns + " FROM `" + sql_.table + "` WHERE name IN (" +
                           marks(requests.size()) + ")";
  const auto params = key_params(requests);
  auto found = by_key(requests, backend_.with_retries(requests.front().key, [&] { return connection.query(read, params); }));
  std::vector<LockInfo> out;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    out.push_back(found[i].empty() ? LockInfo{std::string(requests[i].key)}
                                   : ModeBackend::info(std::string(requests[i].key), found[i], 1));
  }
  return out;
}

void LeaseSets::give_back(Connection& connection, std::span<const backend::AcquireRequest> requests,
                          const std::vector<bool>& kept) {
  std::vector<std::string_view> keys;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (!kept[i]) keys.push_back(requests[i].key);
  }
  drop_bells(connection, keys);
}

std::optional<std::vector<bool>> LeaseSets::free(Connection& connection, std::span<const backend::LeaseRef> leases) {
  const std::size_t n = leases.size();
  std::vector<std::string> bells;
  bells.reserve(n);
  std::string bell = "CASE name", token = "CASE name";
  std::vector<Param> bell_params, token_params;
  for (const auto& lease : leases) {
    bells.push_back(backend_.bell_name(lease.key));
    bell += " WHEN ? THEN ?";
    token += " WHEN ? THEN ?";
    bell_params.insert(bell_params.end(), {lease.key, bells.back()});
    token_params.insert(token_params.end(), {lease.key, static_cast<std::int64_t>(lease.token)});
  }
  bell += " END";
  token += " END";
  // The doorbell is marked rung here and rung once the statement has committed (ring()): a
  // statement that fails has given back nothing.
  const std::string update = "UPDATE `" + sql_.table + "` SET hold_count = IF(owner = ? AND token = " + token +
                             " AND " + kLastHold + ", hold_count, " + kFail + "), " +
                             sql_.free_columns("IF(IS_USED_LOCK(" + bell + ") <=> CONNECTION_ID(), 2, 0)") +
                             " WHERE name IN (" + marks(n) + ")";
  std::vector<Param> params{leases.front().owner};
  params.insert(params.end(), token_params.begin(), token_params.end());
  params.insert(params.end(), bell_params.begin(), bell_params.end());
  const auto keys = key_params(leases);
  params.insert(params.end(), keys.begin(), keys.end());
  Outcome outcome;
  if (!unless_refused(backend_, leases.front().key, [&] { outcome = connection.execute(update, params); })) {
    return std::nullopt;
  }
  if (outcome.affected == n) return std::vector<bool>(n, true);
  // Some lease's row was gone (cleaned up after it ran out): a row left with the lease's token
  // is one this statement freed (a new row starts above it). One freed and taken again since
  // counts as gone too: the set did lose a key.
  const std::string read = "SELECT name, token FROM `" + sql_.table + "` WHERE name IN (" + marks(n) + ")";
  const auto rows = by_key(leases, backend_.with_retries(leases.front().key, [&] { return connection.query(read, keys); }));
  std::vector<bool> freed(n);
  for (std::size_t i = 0; i < n; ++i) freed[i] = !rows[i].empty() && to_u64(rows[i][1]) == leases[i].token;
  return freed;
}

void LeaseSets::ring(Connection& connection, std::span<const backend::LeaseRef> leases) {
  std::vector<std::string_view> keys;
  for (const auto& lease : leases) keys.push_back(lease.key);
  drop_bells(connection, keys);
}

void LeaseSets::drop_bells(Connection& connection, const std::vector<std::string_view>& keys) {
  if (keys.empty()) return;
  std::string columns;
  std::vector<std::string> bells;
  bells.reserve(keys.size());
  std::vector<Param> params;
  for (const auto key : keys) {
    columns += std::string(columns.empty() ? "" : ", ") + "IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), RELEASE_LOCK(?), 0)";
    bells.push_back(backend_.bell_name(key));
    params.insert(params.end(), {bells.back(), bells.back()});
  }
  backend_.with_retries(keys.front(), [&] { return connection.query("SELECT " + columns, params); });
}

}  // namespace dlock::backends::mysql
