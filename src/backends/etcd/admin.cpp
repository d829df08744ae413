#include "backends/etcd/admin.hpp"

#include <algorithm>
#include <map>

#include "backends/etcd/nodes.hpp"
#include "backends/etcd/queue.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends::etcd {
namespace {

// The holder of a queue (its nodes in create order), with the waiters behind it named.
std::optional<LockInfo> holder_of(std::string_view key, const std::vector<pb::KeyValue>& nodes,
                                  std::int64_t count) {
  if (nodes.empty()) return std::nullopt;
  const auto value = from_value(nodes.front().value());
  if (!value) return std::nullopt;
  LockInfo info = to_info(key, nodes.front(), *value, static_cast<std::size_t>(count) - 1);
  std::vector<std::string> queue;
  for (std::size_t i = 1; i < nodes.size() && queue.size() < kQueueShown; ++i) {
    if (const auto waiting = from_value(nodes[i].value())) queue.push_back(waiting->owner);
  }
  info.queue = std::move(queue);
  return info;
}

}  // namespace

std::vector<LockInfo> inspect_key(Connection& c, const std::string& root, std::string_view key) {
  const Queue queue = read_queue(c, root, key, 1 + kQueueShown);
  auto holder = holder_of(key, queue.nodes, queue.count);
  if (!holder) return {};
  return {std::move(*holder)};
}

ListPage list_keys(Connection& c, const std::string& root, std::string_view prefix, std::string_view after,
                   std::size_t limit) {
  ListPage page;
  if (limit == 0) return page;
  const std::string from = keys_from(root, prefix);
  pb::RangeRequest request;
  request.set_key(from);
  request.set_range_end(prefix_end(from));
  const auto range = c.range(request, "list", prefix);
  std::map<std::string, std::vector<pb::KeyValue>> queues;  // by key, in byte order
  for (const auto& node : range.kvs()) {
    auto key = key_of_node(root, node.key());
    if (!key || key->compare(0, prefix.size(), prefix) != 0 || (!after.empty() && *key <= after)) continue;
    queues[*key].push_back(node);
  }
  for (auto& [key, nodes] : queues) {
    std::sort(nodes.begin(), nodes.end(), [](const pb::KeyValue& a, const pb::KeyValue& b) {
      return a.create_revision() < b.create_revision();
    });
    auto holder = holder_of(key, nodes, static_cast<std::int64_t>(nodes.size()));
    if (!holder) continue;
    if (page.locks.size() == limit) {
      page.next_after = page.locks.back().key;
      return page;
    }
    page.locks.push_back(std::move(*holder));
  }
  return page;
}

std::vector<LockInfo> evict(Connection& c, const std::string& root, std::string_view key, Eviction eviction,
                            std::optional<std::uint64_t> token) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const Queue queue = read_queue(c, root, key, 1);
    if (queue.nodes.empty()) return {};
    const pb::KeyValue& holder = queue.nodes.front();
    auto value = from_value(holder.value());
    if (!value) return {};
    const LockInfo info = to_info(key, holder, *value, static_cast<std::size_t>(queue.count) - 1);
    if (token && info.token != *token) return {};
    if (eviction == Eviction::immediate) {
      if (remove_node(c, nullptr, holder.key(), holder.create_revision(), key)) return {info};
      continue;  // released first: the next node holds now
    }
    if (value->evicted) return {info};
    value->evicted = true;
    if (rewrite(c, nullptr, Unanswered::redo, holder, *value, key)) return {info};
    // Changed meanwhile (a re-entry, a release): look again.
  }
  throw BackendError("'" + std::string(key) + "' kept changing hands during force-release", kName,
                     std::string(key), true);
}

}  // namespace dlock::backends::etcd
