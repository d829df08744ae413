#include "backends/sqlite/lock_sets.hpp"

#include <algorithm>
#include <string>
#include <string_view>

#include "backends/sqlite/errors.hpp"
#include "backends/sqlite/host.hpp"
#include "backends/sqlite/rows.hpp"
#include "backends/sqlite/statements.hpp"
#include "backends/sqlite/transaction.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::sqlite {
namespace {

using namespace statements;

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += "\\u00";
      out += "0123456789abcdef"[(c >> 4) & 15];
      out += "0123456789abcdef"[c & 15];
    } else {
      out += c;
    }
  }
  out += '"';
}

// {key: number, ...} (the set statements' ?1) and the owner they share (?2); nothing when
// the items have several owners.
template <class Item, class Number>
std::optional<std::string> json_set(std::span<const Item> items, Number number) {
  std::size_t size = 2;
  for (const Item& item : items) size += item.key.size() + 24;  // quotes, ':', a number, ','
  std::string json = "{";
  json.reserve(size);
  for (const Item& item : items) {
    if (item.owner != items.front().owner) return std::nullopt;
    if (json.size() > 1) json += ',';
    append_json_string(json, item.key);
    json += ':' + std::to_string(number(item));
  }
  return json + '}';
}

// The index of the item with `key` in a set of distinct keys in order; a row of any other key
// is the store's error.
template <class Item>
std::size_t index_of(std::span<const Item> items, std::string_view key, const std::string& path) {
  const auto at = std::lower_bound(items.begin(), items.end(), key,
                                   [](const Item& item, std::string_view k) { return item.key < k; });
  if (at == items.end() || at->key != key) {
    throw BackendError("a set statement returned a key it was not asked for from " + path, kName, std::string(key));
  }
  return static_cast<std::size_t>(at - items.begin());
}

}  // namespace

std::optional<backend::AcquireSetResult> acquire_set(Connection& connection,
                                                    std::span<const backend::AcquireRequest> requests) {
  const auto set = json_set(requests, [](const backend::AcquireRequest& r) { return ttl_us(r.ttl); });
  if (!set || requests.empty()) return std::nullopt;
  Transaction transaction(connection);
  // Under the transaction's write lock, as the statement's own read would be (kAcquireSetText).
  const std::int64_t now = boot_time_us();
  std::vector<backend::Acquired> taken(requests.size());
  std::optional<backend::SetBusy> busy;
  {
    Query query(connection, kAcquireSet);
    query.bind(1, *set).bind(2, requests.front().owner).bind(3, now);
    std::size_t rows = 0;
    for (; query.step(); ++rows) {
      const std::string_view key = query.view(0);
      const std::size_t i = index_of(requests, key, connection.path());
      if (auto refused = refusal(query, key, requests[i].owner, 1)) {
        if (!busy || i < busy->index) busy = backend::SetBusy{i, std::move(*refused)};
      } else {
        taken[i] = backend::Acquired{static_cast<std::uint64_t>(query.int64(2)),
                                     static_cast<std::uint32_t>(query.int64(3))};
      }
    }
    if (rows != requests.size()) {
      throw BackendError("acquire_set returned " + std::to_string(rows) + " rows for " +
                             std::to_string(requests.size()) + " keys from " + connection.path(),
                         kName);
    }
  }
  if (busy) return *busy;  // the transaction rolls back what the set took
  transaction.commit();
  return taken;
}

std::vector<std::optional<std::uint32_t>> release_set(Connection& connection,
                                                      std::span<const backend::LeaseRef> leases) {
  std::vector<std::optional<std::uint32_t>> left(leases.size());
  const auto set =
      json_set(leases, [](const backend::LeaseRef& lease) { return static_cast<std::int64_t>(lease.token); });
  if (!set || leases.empty()) return left;
  Query query(connection, kReleaseSet);
  query.bind(1, *set).bind(2, leases.front().owner);
  while (query.step()) {
    left[index_of(leases, query.view(0), connection.path())] = static_cast<std::uint32_t>(query.int64(1));
  }
  return left;
}

}  // namespace dlock::backends::sqlite
